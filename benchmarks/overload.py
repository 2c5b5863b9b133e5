"""Overload: requests arriving faster than the server answers them, with and without a bound on the queues.

The served model's capacity is measured first (closed loop: `concurrency` clients sending back to back). Then each
queue policy is offered 1x, 2x and 4x that rate in an open loop (arrivals on a schedule, whatever the answers), and
the answered share, the refused share and the latency of the answered requests are read, all in one run. Without a
bound, a queue past capacity only grows, and so does every answer's wait; with one, the server refuses what it
cannot answer in time (UNAVAILABLE, which the client backs off on) and keeps the answered requests' latency near
its value at capacity. best_policy names the policy that does so best.

What drives the load follows `--load-generator`: perf_analyzer (Triton's C++ load generator, `--request-rate-range`
for the open loop) when it is the primary one, else the Python generator. perf_analyzer 2.41 stops at the first
refused request (RateRun.refused), and offered more than it keeps up with it runs on and grows until it is stopped
(RateRun.outran), so a policy whose server refuses, or whose rates outrun perf_analyzer, is measured again, all its
multiples, by the Python generator: a policy's rows, and the ratios of its p99 to its p99 at 1x, always come from one
tool. Answered and refused counts are the server's own (its statistics for the entry model), whichever tool drove
the load.
"""

from __future__ import annotations

import math
import tempfile
import time
from pathlib import Path

from ernie_deploy.bench.config import BenchConfig
from ernie_deploy.bench.load import prepare_requests, run_load, run_open_loop
from ernie_deploy.bench.machine import run_record
from ernie_deploy.bench.perf_analyzer import (
    PERF_ANALYZER,
    PYTHON,
    perf_analyzer_input,
    perf_analyzer_version,
    run_perf_analyzer,
)
from ernie_deploy.bench.perf_analyzer_rate import run_perf_analyzer_rate
from ernie_deploy.bench.rows import percentile
from ernie_deploy.bench.run import build_layout, checked_config
from ernie_deploy.core.errors import FailedRequestsError
from ernie_deploy.core.files import write_json
from ernie_deploy.evaluate.inputs import ModelInputs
from ernie_deploy.server.process import TritonServer
from ernie_deploy.server.stats import ModelTimes, failed_requests, snapshot

# name -> the `ernie-deploy build` options of that policy (on the ensemble): no bound, then the candidates for a bound.
POLICIES = {
    "no queue bound": {},
    "--queue-timeout-us 20000": {"queue_timeout_us": 20000},
    "--queue-timeout-us 50000": {"queue_timeout_us": 50000},
    "--queue-timeout-us 100000": {"queue_timeout_us": 100000},
    "--max-queue-size 16": {"max_queue_size": 16},
    "--max-queue-size 64": {"max_queue_size": 64},
    "--max-queue-size 64 --queue-timeout-us 50000": {"max_queue_size": 64, "queue_timeout_us": 50000},
}
MULTIPLES = (1.0, 2.0, 4.0)
CAPACITY_CONCURRENCY = 16
# best_policy: the answered p99 past capacity may be at most this many times its value at capacity (1x).
P99_BOUND = 2.0
# How long a server may take to drain what an earlier cell left queued before the next cell is measured: perf_analyzer
# can exit while the server still answers what it sent, and without a bound 4x leaves seconds of queue behind
# (measured: p99 16.4 s at 4x over 5 s).
SETTLE_S = 120.0


class _HandOver(Exception):
    """perf_analyzer stopped at a refused request, or could not keep up with the rate and was stopped past its bounds
    (RateRun.outran): the policy is measured again by the Python generator."""


def measure_overload(
    inputs: list[ModelInputs],
    config: BenchConfig,
    workdir: Path,
    policies: dict[str, dict] | None = None,
    multiples: tuple[float, ...] = MULTIPLES,
) -> list[dict]:
    """For each policy, a server built with its options, and a row per task and multiple of the capacity (measured
    once, on the first policy's server, by the primary load generator)."""
    from ernie_deploy.repository.served import served_steps

    config = checked_config(inputs, config)
    tool = PERF_ANALYZER if config.load_generators[0] == PERF_ANALYZER else PYTHON
    rows, capacity = [], {}
    for n, (name, options) in enumerate((policies or POLICIES).items()):
        # the queue policies of the ensemble, whose three steps each hold a queue
        repo = build_layout(inputs, workdir / f"policy{n}", **{"layout": "ensemble", **options})
        steps = served_steps(repo)
        log = workdir / f"policy{n}.log"
        with TritonServer(
            repo, http_port=0, grpc_port=0, metrics_port=0, log_file=log, grpc_tls=config.grpc_tls
        ) as srv:
            for item in inputs:
                cell = _Cell(srv, item, config, workdir, steps[item.name] != [item.name])
                key = item.model.artifact_name
                # Not measured: a fresh server's first requests are slower, and the p99 at 1x is what every ratio
                # divides by. With a tight bound some of these are refused, which is fine here.
                if config.warmup_s > 0:
                    run_load(
                        srv.grpc_url,
                        item.model,
                        cell.requests,
                        CAPACITY_CONCURRENCY,
                        warmup_s=0,
                        duration_s=config.warmup_s,
                        tls=config.tls,
                    )
                if key not in capacity:  # the first policy's capacity is every policy's offered rate
                    capacity[key] = cell.capacity(tool)
                try:
                    got = [cell.measure(tool, name, options, m, m * capacity[key]) for m in multiples]
                except _HandOver as stop:
                    note = f"{stop}; measured by the python generator"
                    got = [cell.measure(PYTHON, name, options, m, m * capacity[key], note) for m in multiples]
                rows.extend(got)
                if config.progress:
                    for r in got:
                        print(
                            f"{name} | {key} {r['multiple']:g}x ({r['offered_per_s']:.0f}/s, {r['tool']}): answered "
                            f"{r['answered_share']:.0%}, refused {r['refused_share']:.0%}, p50 {r['p50_ms']:.1f} ms, "
                            f"p99 {r['p99_ms']:.1f} ms"
                        )
    return rows


class _Cell:
    """One task on one policy's server: its capacity, and its rows at each offered rate."""

    def __init__(self, srv, item: ModelInputs, config: BenchConfig, workdir: Path, ensemble: bool) -> None:
        self.srv, self.item, self.config, self.workdir, self.ensemble = srv, item, config, workdir, ensemble
        self.requests = prepare_requests(item.task, item.texts, 1)
        self.input_file = None
        if config.perf_analyzer:
            self.input_file = perf_analyzer_input(
                item.task, item.texts, workdir / f"{item.model.artifact_name}_overload_input.json"
            )

    def capacity(self, tool: str) -> float:
        """Sequences a second answered by CAPACITY_CONCURRENCY clients sending back to back."""
        key, config = self.item.model.artifact_name, self.config
        if tool == PERF_ANALYZER:
            row = run_perf_analyzer(
                config.perf_analyzer,
                self.item.model,
                self.srv.grpc_url,
                self.srv.http_url,
                self.input_file,
                "overload_capacity",
                1,
                CAPACITY_CONCURRENCY,
                config.duration_s,
                self.workdir,
                server_pgid=self.srv.pid,
                tls=config.tls,
            )
            if row.errors or not row.throughput:
                raise FailedRequestsError(
                    f"{key}: measuring capacity with perf_analyzer failed: {row.note or 'no request answered'}",
                    f"read the server log {self.srv.log_path}, or use `--load-generator python`",
                )
            return row.throughput
        closed = run_load(
            self.srv.grpc_url,
            self.item.model,
            self.requests,
            CAPACITY_CONCURRENCY,
            warmup_s=0,
            duration_s=config.duration_s,
            tls=config.tls,
        )
        if closed.errors or not closed.sequences:
            raise FailedRequestsError(
                f"{key}: measuring capacity failed: {closed.error_messages}",
                f"read the server log {self.srv.log_path}",
            )
        return closed.sequences / closed.seconds

    def measure(self, tool: str, policy: str, options: dict, multiple: float, rate: float, note: str = "") -> dict:
        """One row: `rate` requests a second offered for the run's duration, counted by the server."""

        model, config = self.item.name, self.config
        before = _settled(self.srv.http_url, model)
        if tool == PERF_ANALYZER:
            run = run_perf_analyzer_rate(
                config.perf_analyzer,
                self.item.model,
                self.srv.grpc_url,
                self.input_file,
                rate,
                config.duration_s,
                self.workdir,
                config.tls,
            )
            if run.refused:
                raise _HandOver(f"perf_analyzer stopped at a refusal (at {multiple:g}x, {run.message})")
            if run.outran:
                raise _HandOver(f"at {multiple:g}x, {run.message}")
        else:
            got = run_open_loop(self.srv.grpc_url, self.item.model, self.requests, rate, config.duration_s, config.tls)
        after = _settled(self.srv.http_url, model)
        window = after.get(model, ModelTimes()) - before.get(model, ModelTimes())
        failed = failed_requests(window, self.ensemble)
        row = {
            "policy": policy,
            "options": options,
            "task": self.item.model.artifact_name,
            "multiple": multiple,
            "offered_per_s": rate,
            "tool": tool,
            "answered": window.requests,
            "counted_by": "server",
            "note": note,
        }
        if tool == PERF_ANALYZER:
            # A run that reached its end met no refusal (it stops at the first), so what it put on the server is
            # what the server answered or failed otherwise.
            errors = [run.message] if run.returncode != 0 else []
            row.update(
                offered=window.requests + failed,
                refused=0,
                errors=max(failed, len(errors)),
                error_messages=errors,
                answered_per_s=run.throughput or 0.0,
                p50_ms=run.p50_ms if run.p50_ms is not None else math.nan,
                p99_ms=run.p99_ms if run.p99_ms is not None else math.nan,
                seconds=run.seconds,
                delayed_share=run.delayed_share,
            )
        else:
            latencies_ms = sorted(1000 * s for s in got.latencies_s)
            if self.ensemble:
                # The server's counts; requests that failed otherwise are the client's errors.
                refused = max(0, failed - got.errors)
            else:
                # A model that is not an ensemble does not count a full-queue refusal (server.stats): the client's.
                refused, row["counted_by"] = got.refused, "client"
            row.update(
                offered=got.offered,
                refused=refused,
                errors=got.errors,
                error_messages=got.error_messages,
                answered_per_s=window.requests / got.seconds if got.seconds else 0.0,
                p50_ms=percentile(latencies_ms, 50) if latencies_ms else math.nan,
                p99_ms=percentile(latencies_ms, 99) if latencies_ms else math.nan,
                seconds=got.seconds,
            )
        row["answered_share"] = row["answered"] / row["offered"] if row["offered"] else 0.0
        row["refused_share"] = row["refused"] / row["offered"] if row["offered"] else 0.0
        return row


def _settled(url: str, model: str) -> dict:
    """A statistics snapshot once `model`'s answered and failed counts stop moving: nothing of an earlier run is
    still queued."""

    deadline, last = time.monotonic() + SETTLE_S, None
    while True:
        now = snapshot(url)
        times = now.get(model, ModelTimes())
        count = times.requests + times.failed
        if count == last:
            return now
        if time.monotonic() > deadline:
            raise FailedRequestsError(
                f"{model} was still answering requests {SETTLE_S:.0f} s after the load stopped",
                "shorten --duration, or read the server log: the server may be stuck",
            )
        last = count
        time.sleep(0.2)


def best_policy(rows: list[dict]) -> str | None:
    """The policy whose answered p99 at every multiple above 1x (2x and 4x) stays within P99_BOUND times its own p99
    at 1x, for every task, with no errors, answering the most past capacity (answered per second summed over those
    multiples and tasks); None when no policy does."""
    kept: dict[str, float] = {}
    for policy in dict.fromkeys(r["policy"] for r in rows):
        mine = [r for r in rows if r["policy"] == policy]
        at_1x = {r["task"]: r["p99_ms"] for r in mine if r["multiple"] == 1.0}
        past = [r for r in mine if r["multiple"] > 1.0]
        if not past or any(r["errors"] for r in mine):
            continue
        # NaN (nothing answered) fails every comparison, so such a policy is never kept.
        if all(r["p99_ms"] <= P99_BOUND * at_1x.get(r["task"], math.nan) for r in past):
            kept[policy] = sum(r["answered_per_s"] for r in past)
    return max(kept, key=kept.get) if kept else None


def render_overload(rows: list[dict]) -> str:
    """Markdown: per queue policy (each an ensemble built with its options) and load, the tool that drove it, the
    answered and refused shares (the server's counts) and the answered requests' latency, with p99 against the same
    policy's p99 at capacity (1x)."""
    at_capacity = {(r["policy"], r["task"]): r["p99_ms"] for r in rows if r["multiple"] == 1.0}
    lines = [
        "| policy | task | offered | tool | answered/s | answered | refused | p50 ms | p99 ms | p99 / p99 at 1x |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    notes = []
    for r in rows:
        base = at_capacity.get((r["policy"], r["task"]))
        ratio = f"{r['p99_ms'] / base:.2f}" if base else "–"
        tool = r.get("tool", PYTHON)
        if r.get("note"):
            tool += "†"
            notes.append(f"{r['policy']}: {r['note']}")
        lines.append(
            f"| {r['policy']} | {r['task']} | {r['multiple']:g}x ({r['offered_per_s']:.0f}/s) | {tool} | "
            f"{r['answered_per_s']:.0f} | {r['answered_share']:.0%} | {r['refused_share']:.0%} | {r['p50_ms']:.1f} | "
            f"{r['p99_ms']:.1f} | {ratio} |"
        )
    if notes:
        lines.append("")
        lines.extend(f"- † {note}" for note in dict.fromkeys(notes))
    return "\n".join(lines)


def run_overload(inputs: list[ModelInputs], config: BenchConfig, out: Path) -> list[dict]:
    """`bash scripts/bench.sh overload`: write overload.json in `out`, print the table and the best policy. Errors
    other than refusals raise, after overload.json is written."""
    with tempfile.TemporaryDirectory(prefix="ernie-deploy-overload-") as work:
        rows = measure_overload(inputs, config, Path(work))
    best = best_policy(rows)
    record = run_record(rows)
    record["best_policy"] = best
    if any(r["tool"] == PERF_ANALYZER for r in rows):
        record["perf_analyzer"] = perf_analyzer_version(config.perf_analyzer)
    write_json(record, out / "overload.json")
    print(render_overload(rows))
    print()
    if best:
        print(
            f"best policy: {best} (answered p99 past capacity within {P99_BOUND:g}x its p99 at 1x, answering the most)"
        )
    else:
        print(f"best policy: none (no policy kept its answered p99 past capacity within {P99_BOUND:g}x its p99 at 1x)")
    if any(r["errors"] for r in rows):
        raise FailedRequestsError(
            f"requests failed other than by refusal: {[m for r in rows for m in r['error_messages']][:3]}",
            "read the server logs",
        )
    return rows
