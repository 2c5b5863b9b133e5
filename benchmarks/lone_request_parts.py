"""The parts of `python -m benchmarks.lone_request` that are arithmetic and in-process timing rather than serving: a
lone request's time split part by part (the step timings the served python step wrote, each matched to the client
call it fell in, and the means that add up to the client's wall time), and the in-process references it is set
beside (the fused step of either tree called in this process with its phases timed as served, and the in-process
limit with tokenization at each batch size).

Run as a script (`python benchmarks/lone_request_parts.py step REPO TEXTS NAMED COUNT WARMUP`, with a tree first on
PYTHONPATH) it times that tree's step in-process and prints the result as one JSON line: what `in_process_steps`
runs once a tree a turn. It imports nothing of benchmarks/ that the before tree (`--before`) lacks.
"""

from __future__ import annotations

import csv
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.scores_cost import _env
from ernie_deploy.bench.inprocess import run_cell
from ernie_deploy.bench.rows import chunks, percentile
from ernie_deploy.core.errors import BadRepositoryError, FailedRequestsError
from ernie_deploy.evaluate.inputs import ModelInputs
from ernie_deploy.server.stats import NS_PER_MS, ModelTimes
from ernie_deploy.serving import timing
from ernie_deploy.serving.encoding import encode_items
from ernie_deploy.serving.runtime import OnnxModel
from ernie_deploy.serving.steps import STEPS
from ernie_deploy.serving.tokenizer import load_tokenizer

NAME = "lone"  # the classifier's name in each build's repository
# The breakdown's parts outside the python step, in the order a request meets them.
OUTSIDE = ("grpc", "triton", "queue", "ipc")
LIMIT_BATCHES = (1, 8, 16, 32, 64)  # the main run's in-process batch sizes (bench.config.BATCH_SIZES)


# -- the breakdown -------------------------------------------------------------------------------------------------
def read_timings(folder: Path, model: str) -> list[dict]:
    """Every execute the model's instances timed (serving.timing), in the order they started."""
    rows = []
    for path in sorted(Path(folder).glob(f"{model}.*.csv")):
        with path.open(encoding="ascii") as f:
            rows += [{k: int(v) for k, v in row.items()} for row in csv.DictReader(f)]
    return sorted(rows, key=lambda r: r["start_ns"])


def match(client: list[tuple[int, int]], executes: list[dict]) -> list[dict | None]:
    """Each client call's execute: the one that started and ended inside the call (None where none did)."""
    out, k = [], 0
    for t0, t1 in client:
        while k < len(executes) and executes[k]["start_ns"] < t0:
            k += 1
        inside = k < len(executes) and executes[k]["end_ns"] <= t1
        out.append(executes[k] if inside else None)
    return out


def breakdown(client: list[tuple[int, int]], triton: ModelTimes, executes: list[dict] | None) -> dict:
    """Means a request (ms) of each part of a lone request's time: OUTSIDE, then the python step's phases where
    `executes` (its timings, one an execute) are given; they add up to `client_ms`, the client's mean wall time."""
    if not client or triton.requests <= 0:
        raise FailedRequestsError("no request was answered while the breakdown was measured", "read the server log")
    wall_ms = statistics.mean(t1 - t0 for t0, t1 in client) / NS_PER_MS
    server_ms = triton.per_request_ms(triton.total_ns)
    compute_ms = triton.per_request_ms(triton.compute_ns)
    queue_ms = triton.per_request_ms(triton.queue_ns)
    parts = {
        "grpc": wall_ms - server_ms,
        "triton": server_ms - queue_ms - compute_ms,
        "queue": queue_ms,
        "compute_input": triton.per_request_ms(triton.input_ns),
        "compute_infer": triton.per_request_ms(triton.infer_ns),
        "compute_output": triton.per_request_ms(triton.output_ns),
    }
    out = {
        "client_ms": wall_ms,
        "client_p50_ms": percentile(sorted((t1 - t0) / NS_PER_MS for t0, t1 in client), 50),
        "requests": len(client),
        "texts_per_execute": triton.texts / triton.executions if triton.executions else None,
        "parts_ms": parts,
    }
    if executes:
        matched = [e for e in match(client, executes) if e is not None]
        if not matched:
            raise FailedRequestsError(
                "no timed execute fell inside a client call", "check that the server ran with the step timing on"
            )
        execute_ms = statistics.mean(e["end_ns"] - e["start_ns"] for e in matched) / NS_PER_MS
        parts["ipc"] = compute_ms - execute_ms
        for phase in timing.PHASES:
            parts[phase] = statistics.mean(e[phase] for e in matched) / NS_PER_MS
        pairs = [(c, e) for c, e in zip(client, match(client, executes)) if e is not None]
        out |= {
            "matched": len(matched),
            "execute_ms": execute_ms,
            # the shared clock: the client's send to the execute's start, and the execute's end to the client's read
            "to_execute_ms": statistics.mean(e["start_ns"] - t0 for (t0, _), e in pairs) / NS_PER_MS,
            "from_execute_ms": statistics.mean(t1 - e["end_ns"] for (_, t1), e in pairs) / NS_PER_MS,
        }
    return out


# -- in-process ----------------------------------------------------------------------------------------------------
def in_process_step(repo: Path, texts: list[str], named: set[str], count: int, warmup: int) -> dict:
    """The fused step of `repo` called in this process, one request of one text at a time (naming `named`), its
    phases timed as served: means a request (ms), and the p50 of its calls. The step is the package's this process
    imports: run as `step` with a tree first on PYTHONPATH, that tree's."""
    import numpy as np
    from google.protobuf import text_format
    from google.protobuf.json_format import MessageToDict
    from tritonclient.grpc import model_config_pb2

    parsed = text_format.Parse((repo / NAME / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    config = MessageToDict(parsed, preserving_proto_field_name=True)
    step = STEPS["pipeline"](config, repo / NAME / "1")
    requests = [{"text": np.array([[t.encode("utf-8")]], dtype=np.object_)} for t in texts]
    with tempfile.TemporaryDirectory() as folder:
        timer = timing.PhaseTimer(Path(folder) / "in_process.0.csv")
        timing.instrument(step, timer)
        now, calls = time.perf_counter_ns, []
        for i in range(warmup + count):
            t0 = now()
            results = step.run_requests([requests[i % len(requests)]], named, [named])
            t1 = now()
            if not isinstance(results[0], dict):
                raise results[0]
            timer.done(1, t0, t1, t1 - t0)
            calls.append(t1 - t0)
        timer.close()
        rows = read_timings(Path(folder), "in_process")[warmup:]
    step.close()
    return {
        "p50_ms": percentile(sorted(ns / NS_PER_MS for ns in calls[warmup:]), 50),
        "mean_ms": statistics.mean(calls[warmup:]) / NS_PER_MS,
        "phases_ms": {p: statistics.mean(r[p] for r in rows) / NS_PER_MS for p in (*timing.STEP_PHASES, "step_other")},
    }


def in_process_steps(trees: dict, repos: dict, item: ModelInputs, workdir: Path, count: int, turns: int) -> dict:
    """The before and after builds' steps called in-process, each in its own tree's package (a process a turn, the
    trees in turn; each keeps its best turn, the lowest mean). The before tree gets this checkout's
    serving/timing.py, so that both are timed by the same timers."""
    import shutil
    import subprocess

    shutil.copyfile(Path(timing.__file__), trees["before"] / "ernie_deploy" / "serving" / "timing.py")
    texts = workdir / "texts.json"
    texts.write_text(json.dumps(list(item.texts), ensure_ascii=False), encoding="utf-8")
    named = json.dumps(sorted(t.name for t in item.model.wire.read_specs()))
    out: dict = {}
    for _ in range(turns):
        for variant in ("before", "after"):
            tree = trees[variant]
            command = [sys.executable, str(Path(__file__).resolve()), "step", str(repos[variant]), str(texts), named]
            command += [str(count), str(min(count, 300))]
            done = subprocess.run(command, cwd=tree, env=_env(tree), capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                raise BadRepositoryError(f"the {variant} step in-process failed: {done.stderr[-2000:]}", "read it")
            got = json.loads(done.stdout.strip().splitlines()[-1])
            if variant not in out or got["mean_ms"] < out[variant]["mean_ms"]:
                out[variant] = got
    return out


def step_main(argv: list[str]) -> int:
    repo, texts, named, count, warmup = argv
    texts = json.loads(Path(texts).read_text(encoding="utf-8"))
    print(json.dumps(in_process_step(Path(repo), texts, set(json.loads(named)), int(count), int(warmup))))
    return 0


def in_process_limit(item: ModelInputs, duration_s: float, batches: tuple[int, ...] = LIMIT_BATCHES) -> dict:
    """The in-process limit with tokenization (as bench.inprocess times it: encode_items, then onnxruntime with its
    own defaults): texts a second and p50 at each batch size."""
    tokenizer = load_tokenizer(item.static.vocab_file)
    model = OnnxModel(item.onnx)
    max_len = item.model.max_seq_len

    def run_texts(texts) -> float:
        enc = encode_items(tokenizer, texts, max_len)
        model(enc.input_ids, enc.token_type_ids)
        return 0.0

    out = {}
    for batch in batches:
        calls = chunks(item.texts, batch)
        latencies, texts, wall, _ = run_cell(run_texts, calls, [len(c) for c in calls], duration_s, 0.5)
        out[batch] = {"texts_per_s": texts / wall, "p50_ms": percentile(sorted(1000 * s for s in latencies), 50)}
    return out


def best_limit(limits: list[dict]) -> dict:
    """The in-process limit over the rounds, each cell its best: batch 1's lowest p50, each batch's highest
    texts a second, and the best batch."""
    batches = list(limits[0])
    by_batch = {b: max(l_[b]["texts_per_s"] for l_ in limits) for b in batches}
    best = max(by_batch, key=by_batch.get)
    return {
        "b1_p50_ms": min(l_[1]["p50_ms"] for l_ in limits),
        "best_batch": best,
        "best_texts_per_s": by_batch[best],
        "texts_per_s_by_batch": by_batch,
    }


if __name__ == "__main__" and sys.argv[1:2] == ["step"]:
    raise SystemExit(step_main(sys.argv[2:]))
