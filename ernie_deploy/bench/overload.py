"""Overload: requests arriving faster than the server answers them, with and without a bound on the queues.

The served model's capacity is measured first (closed loop: `concurrency` clients sending back to back). Then each
layout is offered 1x, 2x and 4x that rate in an open loop (arrivals on a schedule, whatever the answers), and the
answered share, the refused share and the latency of the answered requests are read, all in one run. Without a
bound, a queue past capacity only grows, and so does every answer's wait; with one, the server refuses what it
cannot answer in time (UNAVAILABLE, which the client backs off on) and keeps the answered requests' latency near
its value at capacity.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from ernie_deploy.bench.config import BenchConfig, TaskInputs
from ernie_deploy.bench.load import prepare_requests, run_load, run_open_loop
from ernie_deploy.bench.machine import run_record
from ernie_deploy.bench.rows import percentile
from ernie_deploy.bench.served import build_layout
from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.files import write_json

# name -> the `ernie-deploy build` options of that layout.
POLICIES = {
    "no queue bound": {},
    "--max-queue-size 64": {"max_queue_size": 64},
    "--queue-timeout-us 20000": {"queue_timeout_us": 20000},
    "--queue-timeout-us 100000": {"queue_timeout_us": 100000},
}
MULTIPLES = (1.0, 2.0, 4.0)
CAPACITY_CONCURRENCY = 16


def measure_overload(
    inputs: list[TaskInputs],
    config: BenchConfig,
    workdir: Path,
    policies: dict[str, dict] | None = None,
    multiples: tuple[float, ...] = MULTIPLES,
) -> list[dict]:
    from ernie_deploy.server.process import TritonServer

    rows, capacity = [], {}
    for n, (name, options) in enumerate((policies or POLICIES).items()):
        repo = build_layout(inputs, workdir / f"policy{n}", **options)
        log = workdir / f"policy{n}.log"
        with TritonServer(
            repo, http_port=0, grpc_port=0, metrics_port=0, log_file=log, grpc_tls=config.grpc_tls
        ) as srv:
            for item in inputs:
                requests = prepare_requests(item.task, item.texts, 1)
                key = item.task.artifact_name
                if key not in capacity:  # the first layout's capacity is every layout's offered rate
                    closed = run_load(
                        srv.grpc_url,
                        item.task,
                        requests,
                        CAPACITY_CONCURRENCY,
                        warmup_s=config.warmup_s,
                        duration_s=config.duration_s,
                        tls=config.tls,
                    )
                    if closed.errors or not closed.sequences:
                        raise ErnieDeployError(
                            f"{key}: measuring capacity failed: {closed.error_messages}", "read the server log"
                        )
                    capacity[key] = closed.sequences / closed.seconds
                for multiple in multiples:
                    rate = multiple * capacity[key]
                    got = run_open_loop(srv.grpc_url, item.task, requests, rate, config.duration_s, config.tls)
                    rows.append(_row(name, options, key, multiple, rate, got))
                    if config.progress:
                        r = rows[-1]
                        print(
                            f"{name} | {key} {multiple:g}x ({rate:.0f}/s): answered {r['answered_share']:.0%}, "
                            f"refused {r['refused_share']:.0%}, p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms"
                        )
    return rows


def _row(policy: str, options: dict, task: str, multiple: float, rate: float, got) -> dict:
    latencies_ms = sorted(1000 * s for s in got.latencies_s)
    return {
        "policy": policy,
        "options": options,
        "task": task,
        "multiple": multiple,
        "offered_per_s": rate,
        "offered": got.offered,
        "answered_per_s": len(latencies_ms) / got.seconds if got.seconds else 0.0,
        "answered_share": len(latencies_ms) / got.offered,
        "refused_share": got.refused / got.offered,
        "errors": got.errors,
        "error_messages": got.error_messages,
        "p50_ms": percentile(latencies_ms, 50) if latencies_ms else float("nan"),
        "p99_ms": percentile(latencies_ms, 99) if latencies_ms else float("nan"),
        "seconds": got.seconds,
    }


def render_overload(rows: list[dict]) -> str:
    """Markdown: per layout and load, the answered and refused shares and the answered requests' latency, with p99
    against the same layout's p99 at capacity (1x)."""
    at_capacity = {(r["policy"], r["task"]): r["p99_ms"] for r in rows if r["multiple"] == 1.0}
    lines = [
        "| layout | task | offered | answered/s | answered | refused | p50 ms | p99 ms | p99 / p99 at 1x |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        base = at_capacity.get((r["policy"], r["task"]))
        ratio = f"{r['p99_ms'] / base:.2f}" if base else "–"
        lines.append(
            f"| {r['policy']} | {r['task']} | {r['multiple']:g}x ({r['offered_per_s']:.0f}/s) | "
            f"{r['answered_per_s']:.0f} | {r['answered_share']:.0%} | {r['refused_share']:.0%} | {r['p50_ms']:.1f} | "
            f"{r['p99_ms']:.1f} | {ratio} |"
        )
    return "\n".join(lines)


def run_overload(inputs: list[TaskInputs], config: BenchConfig, out: Path) -> list[dict]:
    """`ernie-deploy bench --overload`: write overload.json in `out` and print the table. Errors other than
    refusals raise, after overload.json is written."""
    with tempfile.TemporaryDirectory(prefix="ernie-deploy-overload-") as work:
        rows = measure_overload(inputs, config, Path(work))
    write_json(run_record(rows), out / "overload.json")
    print(render_overload(rows))
    if any(r["errors"] for r in rows):
        raise ErnieDeployError(
            f"requests failed other than by refusal: {[m for r in rows for m in r['error_messages']][:3]}",
            "read the server logs",
        )
    return rows
