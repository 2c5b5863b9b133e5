"""`python -m benchmarks.lone_request`: where a lone request's time goes on the fused classifier served by
tritonserver over gRPC, against the same work in-process, and what this project's cuts to its python step gave,
before and after in one run.

Method, one request at a time (c1) from this process's synchronous gRPC client (tritonclient), the request tensors
built once (bench.load), after a warm-up:
- the client's wall time of each call, read with `time.perf_counter_ns` (CLOCK_MONOTONIC);
- Triton's own statistics over the same requests (`/v2/models/stats`, server.stats): the request's time in the
  server (success), its queue and its compute input, infer and output;
- the python step's own phases (serving.timing, switched on by ERNIE_DEPLOY_STEP_TIMING for this server alone):
  each execute's start and end on the same clock as the client's, and the ns of each phase inside it.
From them, in means a request (which add up to the client's mean wall time):
- grpc: the client's wall less the request's time in Triton (the client library, the loopback, Triton's gRPC
  frontend reading the request and writing the answer);
- triton: Triton's time around the model, neither queue nor compute (its scheduling, the request and the response);
- queue: the time in the model's queue (the dynamic batcher, no delay set);
- ipc: the model's compute less the python step's execute (the python backend's round trip to its stub process:
  the request and the tensors through shared memory, the stub woken, the response back);
- the execute's phases (serving.timing.PHASES): inputs, check, tokenize, model, postprocess, watch, step_other,
  response.
The in-process references, on the same texts, one at a time: the in-process limit with tokenization at batch 1
(bench.inprocess: encode_items then onnxruntime with its own defaults), and the fused step itself called in this
process with its phases timed the same way. Concurrency 1 and 8 are then driven by perf_analyzer on the same server
with the timing off (`--load python`: the built-in asyncio generator), and the in-process limit with tokenization
at its best batch size is measured in the same run (c8's ratio is against it).

Before and after: the classifier built and served by the source tree of `--before` (git archive; its server's
python steps import that tree's package, benchmarks/scores_cost.py) and by this checkout, in alternating rounds, each
cell keeping its best round (the least disturbed by other work on a shared host). The step timing is this checkout's:
the before build's rows hold Triton's statistics and the client's time alone.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from benchmarks.lone_request_parts import (
    NAME,
    best_limit,
    breakdown,
    in_process_limit,
    in_process_steps,
    read_timings,
    step_main,
)
from benchmarks.scores_cost import ROOT, _env, _serving, source_tree
from ernie_deploy.bench.load import load_row, prepare_requests, run_load
from ernie_deploy.bench.machine import run_record
from ernie_deploy.bench.perf_analyzer import find_perf_analyzer, perf_analyzer_input, run_perf_analyzer
from ernie_deploy.client.grpc_client import grpc_client
from ernie_deploy.core.errors import BadRepositoryError, FailedRequestsError
from ernie_deploy.core.files import write_json
from ernie_deploy.core.tasks import DEMO_MODELS
from ernie_deploy.evaluate.inputs import ModelInputs
from ernie_deploy.server.stats import ModelTimes, snapshot
from ernie_deploy.serving import timing

BEFORE = "287dd57"  # the last revision before this benchmark's cuts to the python step
OUT = Path("docs/lone-request.json")
# The variants: which tree builds and serves it, and the build's flags beyond the default.
VARIANTS = {
    "before": ("before", ()),
    "after": ("after", ()),
    "after, --ort-spinning run": ("after", ("--ort-spinning", "run")),
    "after, --instances 2": ("after", ("--instances", "2")),
    "after, --instances 2 --ort-threads 1": ("after", ("--instances", "2", "--ort-threads", "1")),
}


# -- measuring -----------------------------------------------------------------------------------------------------
def lone_requests(url: str, stats_url: str, model: str, requests: list, count: int, warmup: int):
    """(each call's (sent, read) ns, Triton's statistics over the timed calls) of `count` calls one at a time."""
    client = grpc_client(url)
    try:
        for i in range(warmup):
            client.infer(model, requests[i % len(requests)].inputs)
        before = snapshot(stats_url)
        marks = []
        for i in range(count):
            request = requests[i % len(requests)]
            t0 = time.perf_counter_ns()
            client.infer(model, request.inputs)
            marks.append((t0, time.perf_counter_ns()))
        after = snapshot(stats_url)
    finally:
        client.close()
    return marks, after.get(model, ModelTimes()) - before.get(model, ModelTimes())


def build_repository(tree: Path, item: ModelInputs, repo: Path, flags: tuple[str, ...]) -> None:
    """The classifier's default build (python runtime, fused) as NAME into `repo`, by the `build` of `tree`."""
    import subprocess

    command = [
        sys.executable, "-m", "ernie_deploy.cli", "build", "--model", NAME, "--static",
        str(Path(item.static.root).resolve()), "--onnx", str(Path(item.onnx).resolve()), "--runtime", "python",
        "--repository", str(repo.resolve()), *flags,
    ]  # fmt: skip
    done = subprocess.run(command, cwd=tree, env=_env(tree), capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise BadRepositoryError(f"build in {tree} failed: {done.stderr[-2000:]}", "read the error above")


@contextmanager
def _timed_serving(tree: Path, repo: Path, log: Path, folder: Path | None):
    """`_serving`, with the step timing on (into `folder`) where it is given."""
    saved = os.environ.pop(timing.ENV, None)
    if folder is not None:
        os.environ[timing.ENV] = str(folder)
    try:
        context = _serving(tree, repo, log)
        server = context.__enter__()
    finally:
        os.environ.pop(timing.ENV, None)
        if saved is not None:
            os.environ[timing.ENV] = saved
    try:
        yield server
    finally:
        context.__exit__(None, None, None)


def loaded_cells(server, item: ModelInputs, workdir: Path, variant: str, duration_s: float, binary: str | None):
    """c1 and c8 on `server`, one text a request: perf_analyzer's rows where it is installed, else bench.load's."""
    model = replace(item.model, name=NAME)
    requests = prepare_requests(item.task, item.texts, 1)
    input_file = perf_analyzer_input(item.task, item.texts, workdir / "perf_analyzer_input.json")
    cells = {}
    for concurrency in (1, 8):
        # the same warm-up the main run gives a cell before perf_analyzer measures
        run_load(server.grpc_url, model, requests, concurrency, warmup_s=0, duration_s=1.0)
        if binary:
            cell_dir = workdir / f"{variant}_c{concurrency}"
            cell_dir.mkdir(exist_ok=True)
            row = run_perf_analyzer(
                binary, model, server.grpc_url, server.http_url, input_file, variant, 1, concurrency, duration_s,
                cell_dir, server_pgid=server.pid,
            )  # fmt: skip
        else:
            got = run_load(
                server.grpc_url, model, requests, concurrency, warmup_s=0, duration_s=duration_s,
                server_pgid=server.pid, stats_url=server.http_url,
            )  # fmt: skip
            row = load_row(model, variant, 1, concurrency, got)
        if row.errors:
            raise FailedRequestsError(f"{variant} c{concurrency}: {row.errors} failed ({row.note})", "read its log")
        cells[concurrency] = {
            "texts_per_s": row.throughput,
            "p50_ms": row.p50_ms,
            "p99_ms": row.p99_ms,
            "server_cpu_ms_per_text": row.server_cpu_ms,
            "client_cpu_ms_per_request": row.client_cpu_ms,
            "texts_per_execute": next(iter((row.steps or {}).values()), {}).get("texts_per_execution"),
            "load_average": [round(v, 2) for v in os.getloadavg()],
        }
    return cells


def measure(item: ModelInputs, workdir: Path, args) -> dict:
    variants = {name: VARIANTS[name] for name in args.variants}
    trees = {"before": source_tree(args.before, workdir / "before"), "after": ROOT}
    repos = {}
    for n, (variant, (tree, flags)) in enumerate(variants.items()):
        repos[variant] = workdir / f"models_{n}"
        build_repository(trees[tree], item, repos[variant], flags)
    binary = None if args.load == "python" else find_perf_analyzer()
    requests = prepare_requests(item.task, item.texts, 1)
    rounds: list[dict] = []
    limits: list[dict] = []
    for round_ in range(args.rounds):
        # The in-process limit in every round too: on a shared host it moves as much as the served cells do.
        limits.append(in_process_limit(item, args.inproc_duration))
        print(f"round {round_} in-process limit+tok: {_limit_line(limits[-1])}", flush=True)
        names = list(variants)
        order = names[round_ % len(names) :] + names[: round_ % len(names)]
        for variant in order:
            tree = trees[variants[variant][0]]
            folder = workdir / f"timing_{names.index(variant)}_{round_}"
            log = workdir / f"{names.index(variant)}_{round_}.log"
            with _timed_serving(tree, repos[variant], log, folder) as server:
                client, window = lone_requests(
                    server.grpc_url, server.http_url, NAME, requests, args.requests, args.warmup
                )
            # the before tree has no step timing: Triton's statistics and the client's time alone
            executes = read_timings(folder, NAME) if folder.is_dir() else []
            if variants[variant][0] == "after" and not executes:
                raise FailedRequestsError(
                    f"the {variant} server wrote no step timings into {folder}",
                    f"check that {timing.ENV} reaches its python stubs: read {log}",
                )
            parts = breakdown(client, window, executes or None)
            log = workdir / f"{names.index(variant)}_{round_}_load.log"
            with _timed_serving(tree, repos[variant], log, None) as server:
                cells = loaded_cells(server, item, workdir, f"{names.index(variant)}_{round_}", args.duration, binary)
            rounds.append({"variant": variant, "round": round_, "lone": parts, "cells": cells})
            print(_line(rounds[-1]), flush=True)
    return {
        "rounds": rounds,
        "limits": limits,
        "load_generator": "perf_analyzer" if binary else "python",
        "repos": repos,
        "trees": trees,
    }


def _limit_line(limit: dict) -> str:
    return ", ".join(f"b{b} {c['texts_per_s']:.0f} texts/s p50 {c['p50_ms']:.3f} ms" for b, c in limit.items())


def _line(r: dict) -> str:
    lone, cells = r["lone"], r["cells"]
    return (
        f"round {r['round']} {r['variant']:<7} lone: client p50 {lone['client_p50_ms']:.3f} ms, mean "
        f"{lone['client_ms']:.3f} ms; c1 p50 {cells[1]['p50_ms']:.3f} ms; c8 {cells[8]['texts_per_s']:.1f} texts/s; "
        + ", ".join(f"{k} {v:.3f}" for k, v in lone["parts_ms"].items())
    )


def summary(rounds: list[dict], limit: dict) -> dict:
    """Per variant: the lone breakdown of its least disturbed round (the lowest client mean), c1 p50 (its lowest
    round) over the in-process batch-1 p50 with tokenization, and c8 (its highest round) over the best batch's."""
    out = {}
    for variant in dict.fromkeys(r["variant"] for r in rounds):
        own = [r for r in rounds if r["variant"] == variant]
        lone = min(own, key=lambda r: r["lone"]["client_ms"])
        c1 = min(own, key=lambda r: r["cells"][1]["p50_ms"])
        c8 = max(own, key=lambda r: r["cells"][8]["texts_per_s"])
        out[variant] = {
            "lone_round": lone["round"],
            "lone": lone["lone"],
            "c1_p50_ms": c1["cells"][1]["p50_ms"],
            "c1_added_ms": c1["cells"][1]["p50_ms"] - limit["b1_p50_ms"],
            "c1_load_average": c1["cells"][1]["load_average"],
            "c8_texts_per_s": c8["cells"][8]["texts_per_s"],
            "c8_ratio": c8["cells"][8]["texts_per_s"] / limit["best_texts_per_s"],
            "c8_p50_ms": c8["cells"][8]["p50_ms"],
            "c8_texts_per_execute": c8["cells"][8]["texts_per_execute"],
            "c8_load_average": c8["cells"][8]["load_average"],
        }
    return out


def render(result: dict) -> str:
    lines = []
    for variant, s in result["summary"].items():
        parts = ", ".join(f"{k} {v:.3f}" for k, v in s["lone"]["parts_ms"].items())
        lines.append(
            f"{variant}: c1 p50 {s['c1_p50_ms']:.3f} ms ({s['c1_added_ms']:+.3f} over in-process), c8 "
            f"{s['c8_texts_per_s']:.1f} texts/s ({s['c8_ratio']:.2f}x the limit); lone client mean "
            f"{s['lone']['client_ms']:.3f} ms: {parts}"
        )
    for variant, step in (result.get("in_process_step") or {}).items():
        phases = ", ".join(f"{k} {v:.3f}" for k, v in step["phases_ms"].items())
        lines.append(f"in-process step, {variant}: p50 {step['p50_ms']:.3f} ms, mean {step['mean_ms']:.3f}: {phases}")
    lines.append(f"in-process limit+tok: {result['in_process_limit']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["step"]:
        return step_main(argv[1:])
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.lone_request", description=__doc__.split("\n\n")[0], allow_abbrev=False
    )
    p.add_argument("--model", default=DEMO_MODELS["seq_cls"], help="a classifier's name (default %(default)s)")
    p.add_argument("--requests", type=int, default=2000, help="lone requests timed a round (default %(default)s)")
    p.add_argument("--warmup", type=int, default=200, help="requests sent first, not timed (default %(default)s)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of every variant (default %(default)s)")
    p.add_argument("--duration", type=float, default=6.0, help="seconds of each c1 and c8 cell (default %(default)s)")
    p.add_argument("--inproc-duration", type=float, default=3.0, help="seconds of each in-process cell")
    p.add_argument("--before", default=BEFORE, help="the revision the before build is (default %(default)s)")
    p.add_argument("--load", choices=("perf_analyzer", "python"), default="perf_analyzer", help="c1 and c8's driver")
    p.add_argument(
        "--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS), help="the builds compared (all)"
    )
    p.add_argument("--out", type=Path, default=OUT, help="the results file (default %(default)s)")
    args = p.parse_args(argv)
    item = ModelInputs.load(args.model, max_texts=1000)
    load_start = [round(v, 2) for v in os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix="ernie-deploy-lone-request-") as work:
        workdir = Path(work)
        measured = measure(item, workdir, args)
        limit = best_limit(measured["limits"])
        steps = None
        if {"before", "after"} <= set(args.variants):
            steps = in_process_steps(measured["trees"], measured["repos"], item, workdir, args.requests, args.rounds)
            print(f"in-process steps: {steps}", flush=True)
    record = run_record([])
    record["machine"]["loadavg_start"] = load_start  # run_record reads the load as it writes: the run's end
    result = {"date": record["date"], "machine": record["machine"], "command": record["command"]}
    result |= {
        "model": item.model.artifact_name,
        "before": args.before,
        "load_generator": measured["load_generator"],
        "load_average_start": load_start,
        "load_average_end": [round(v, 2) for v in os.getloadavg()],
        "requests": args.requests,
        "in_process_limit": limit,
        "in_process_step": steps,
        "summary": summary(measured["rounds"], limit),
        "rounds": measured["rounds"],
        "limit_rounds": measured["limits"],
    }
    print(render(result))
    if args.out:
        write_json(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
