"""`python -m benchmarks.embed`: served texts/s of an embed model against its in-process limit and against the peer
a user would pick instead, infinity-emb, in one run on one machine (the tables in docs/BENCHMARKS.md, "Embeddings").

One embed model, an ErnieEncoder at ERNIE 3.0 nano's shape with random weights (a vector costs the same whatever was
learned), goes through `ernie-deploy add --task embed` (parity gate) into the fused python model twice, as the default
build and as a second model added with `--max-batch-size 1` (Triton's dynamic batcher then merges no requests: each
runs alone), and one tritonserver serves both. One text a request, in rounds (each cell keeps its best round, the
least disturbed by other work on a shared host):
- in-process: the step the server runs (serving.steps.STEPS, built from the model's own config.pbtxt and version
  folder), handed B one-text requests a call as Triton's dynamic batcher hands them, back to back; B = 1 and 8, the
  better B is the limit;
- grpc: the closed loop of bench.load at concurrency 1 and 8, on each build;
- gateway: `ernie-deploy gateway`'s OpenAI route, POST /v1/embeddings, at concurrency 1 and 8 (skipped, with the
  reason recorded, when the route does not answer);
- peer: infinity-emb serving a Hugging Face BertModel of the same shape (benchmarks/embed_model.py: the shape's
  layers, hidden size, heads, intermediate size and vocabulary, BERT's 512 positions; random weights; a fast BERT
  tokenizer of the same vocabulary file and lower-casing, so both read the same tokens) from a local folder, through
  its own OpenAI-style route, POST /embeddings, at concurrency 1 and 8, on each engine it offers on a CPU (torch;
  optimum, ONNX Runtime on optimum's ONNX export of the model; ctranslate2), its vector cache off
  (`--no-vector-disk-cache`: the served model caches no answers either). Its servers are started from this process,
  so they run on the same cores as tritonserver (the affinity both inherit); every server is up for the whole run,
  idle while another one's cells run.
The HTTP cells (gateway and peer) are sent by one generator (benchmarks/gateway.py's run_http_load: each request's
bytes built once, one keep-alive connection per worker), the same body to both: {"model": name, "input": [text]}.

Before the cells, the served vectors of the first CHECKED texts (gRPC on each build, and the gateway's route on the
default one, one text a request) must be the in-process step's (cosine >= 0.99999, the embed kind's parity), so that
the limit computes what the server computes; each peer engine must answer one vector of the model's size a text, and
the engines' vectors are compared with each other (the same weights: they agree when each runs the model as the
others do).

The texts: InsuranceQA's test questions and answers (Chinese), alternating, those that fit the model's max_seq_len
whole, when the split is prepared (`ernie-deploy fetch --task embed`), else a fixed list.

The peer is installed in a virtual environment of its own (its torch, transformers and optimum pins would break this
project's); PyPI's default torch wheel runs on a CPU, and a CPU-only build, where one is at hand, is smaller:

    python3 -m venv /tmp/peer-venv
    /tmp/peer-venv/bin/pip install "infinity-emb[server,torch,optimum]" ctranslate2
    python -m benchmarks.embed --peer-python /tmp/peer-venv/bin/python

Without --peer-python the peer's cells are skipped, and the printout and the record say so. Every engine is started
inside the model's folder with `--model-id .`: given a folder's absolute path, infinity-emb 0.0.78 hands optimum 2 the
ONNX file's whole path where optimum's loader compares bare file names, and finds no model.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from benchmarks.embed_model import (
    ENGINES,
    NAME,
    NAME_MBS1,
    bench_texts,
    build_model,
    build_peer_model,
    check_grpc,
    check_openai,
    in_process_vectors,
    load_step,
    openai_answer,
    openai_body,
    peer_versions,
    start_peers,
    step_request,
)
from benchmarks.gateway import run_http_load
from benchmarks.peer_rows import PeerRequest
from benchmarks.step_timing import cell_of, time_step_calls
from ernie_deploy.bench.load import LoadResult, prepare_requests, run_load
from ernie_deploy.bench.machine import loadavg, machine_info, package_versions, run_record, server_version
from ernie_deploy.core.errors import FailedRequestsError, ServerNotReadyError
from ernie_deploy.core.files import write_json
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.core.tasks import EMBED
from ernie_deploy.gateway.process import GatewayProcess
from ernie_deploy.server.process import TritonServer
from ernie_deploy.server.procs import group_cpu_seconds

BATCHES = (1, 8)  # requests per in-process call: one alone, and the most that concurrency 8 can merge
CONCURRENCY = (1, 8)
ROUNDS, DURATION_S = 3, 5.0
CHECKED = 20  # texts whose served vectors are compared with the in-process step's
# The goals: served c8 at 0.8x the in-process limit or more; c8 at the peer's throughput or more; a lone
# request's p50 at the peer's or less.
GOALS = {"c8_over_limit": 0.8, "c8_over_peer": 1.0, "c1_p50_over_peer": 1.0}
WAYS = ("in-process", "grpc", "grpc_mbs1", "gateway", "peer")
# The served ways, each the ratios are read for: gRPC to each build (the default one; NAME_MBS1, max batch size 1), and
# the gateway's route (to the default build).
OURS = {"grpc": "gRPC", "grpc_mbs1": "gRPC (max batch size 1)", "gateway": "gateway /v1/embeddings"}


def time_in_process(step, texts: list[str], batch: int, duration_s: float, warmup_s: float) -> dict:
    """`batch` one-text requests per call of the step, back to back over `texts` (cycling), for `duration_s`."""
    requests = [step_request(t) for t in texts]
    return cell_of(*time_step_calls(step, requests, batch, duration_s, warmup_s))


def _served(got: LoadResult, what: str, log: Path, **cpu) -> dict:
    if got.errors:
        raise FailedRequestsError(f"{what}: {got.error_messages}", f"read {log}")
    cell = cell_of(got.sequences, got.seconds, got.latencies_s)
    return {**cell, "server_cpu_s": got.server_cpu_s, "client_cpu_s": got.client_cpu_s, **cpu}


def measure(work: Path, repo: Path, texts: list[str], *, peer: dict | None, rounds, duration_s, warmup_s) -> dict:
    """Every cell's rounds, and what the checks found."""
    models = {"grpc": ModelSpec.read(repo / NAME / "1"), "grpc_mbs1": ModelSpec.read(repo / NAME_MBS1 / "1")}
    step = load_step(repo)
    skipped: dict[str, str] = {}
    try:
        ours, lengths = in_process_vectors(step, texts)
        facts = {"tokens_per_text": float(lengths.mean()), "checked_tokens_per_text": float(lengths[:CHECKED].mean())}
        log = work / "server.log"
        with ExitStack() as stack:
            server = stack.enter_context(TritonServer(repo, http_port=0, grpc_port=0, metrics_port=0, log_file=log))
            facts["tritonserver"] = server_version(server.http_url)
            facts["grpc_min_cosine"] = check_grpc(server.grpc_url, ours[:CHECKED], texts[:CHECKED])
            facts["grpc_mbs1_min_cosine"] = check_grpc(server.grpc_url, ours[:CHECKED], texts[:CHECKED], NAME_MBS1)
            gateway = GatewayProcess(repo, server.grpc_url, log_file=work / "gateway.log")
            try:
                stack.enter_context(gateway)
                found = check_openai(gateway.url, ours[:CHECKED], texts[:CHECKED])
            except (ServerNotReadyError, OSError) as exc:
                found = f"the gateway did not start: {str(exc).splitlines()[0][:200]}"
            if isinstance(found, str):
                skipped["gateway"] = found
                print(f"gateway skipped: {found}", flush=True)
            else:
                facts["gateway_min_cosine"] = found
            peers = {}
            if peer is None:
                skipped["peer"] = "no --peer-python: install infinity-emb as benchmarks/embed.py's docstring says"
                print(f"peer skipped: {skipped['peer']}", flush=True)
            else:
                dim = ours.shape[-1]
                peers, facts["peer"] = start_peers(
                    peer["python"], peer["folder"], peer["engines"], texts[:CHECKED], dim, work, stack, skipped
                )
            gateway = None if "gateway" in skipped else gateway
            rows = _rounds(step, server, gateway, peers, models, texts, log, rounds, duration_s, warmup_s)
    finally:
        step.close()
    return {"rows": rows, "facts": facts, "skipped": skipped}


def _rounds(step, server, gateway, peers, models, texts, log, rounds, duration_s, warmup_s) -> list[dict]:
    timing = {"warmup_s": warmup_s, "duration_s": duration_s}
    grpc = prepare_requests(EMBED, texts, 1)
    bodies = [PeerRequest(openai_body(NAME, t), 1) for t in texts]
    rows: list[dict] = []

    def add(row: dict) -> None:
        rows.append(row)
        _print(row)

    for round_ in range(rounds):
        for batch in BATCHES:
            cell = time_in_process(step, texts, batch, duration_s, warmup_s)
            add({"way": "in-process", "engine": None, "batch": batch, "concurrency": None, "round": round_, **cell})
        for way, model in models.items():
            for c in CONCURRENCY:
                got = run_load(server.grpc_url, model, grpc, c, server_pgid=server.pid, **timing)
                cell = _served(got, f"{way} c{c}", log)
                add({"way": way, "engine": None, "batch": None, "concurrency": c, "round": round_, **cell})
        if gateway is not None:
            for c in CONCURRENCY:
                before = group_cpu_seconds(gateway.pid)
                url = f"{gateway.url}/v1/embeddings"
                got = run_http_load(url, bodies, c, openai_answer, server_pgid=server.pid, **timing)
                spent = group_cpu_seconds(gateway.pid) - before
                cell = _served(got, f"gateway c{c}", gateway.log_path, gateway_cpu_s=spent)
                add({"way": "gateway", "engine": None, "batch": None, "concurrency": c, "round": round_, **cell})
        for engine, peer in peers.items():
            for c in CONCURRENCY:
                got = run_http_load(f"{peer.url}/embeddings", bodies, c, openai_answer, server_pgid=peer.pid, **timing)
                cell = _served(got, f"peer {engine} c{c}", peer.log_path)
                add({"way": "peer", "engine": engine, "batch": None, "concurrency": c, "round": round_, **cell})
    return rows


def _cell_key(row: dict) -> tuple:
    return row["way"], row.get("engine"), row.get("batch"), row.get("concurrency")


def best(rows: list[dict]) -> list[dict]:
    """Per cell, the round with the highest throughput."""
    kept: dict = {}
    for r in rows:
        if _cell_key(r) not in kept or r["texts_per_s"] > kept[_cell_key(r)]["texts_per_s"]:
            kept[_cell_key(r)] = r
    ways, engines = {w: i for i, w in enumerate(WAYS)}, {e: i for i, e in enumerate(ENGINES)}
    return sorted(
        kept.values(), key=lambda r: (ways[r["way"]], engines.get(r["engine"], -1), r["batch"] or r["concurrency"])
    )


def ratios(best_rows: list[dict]) -> dict:
    """Served texts/s over the in-process limit (its best batch); ours over the peer (at c8 its best engine's
    texts/s, at c1 its best engine's p50: the peer at its best in each)."""
    by = {_cell_key(r): r for r in best_rows}
    limit = max((r for r in best_rows if r["way"] == "in-process"), key=lambda r: r["texts_per_s"])
    out = {"limit_batch": limit["batch"], "limit_texts_per_s": limit["texts_per_s"]}
    ours = [w for w in OURS if (w, None, None, 8) in by]
    for way in ours:
        for c in CONCURRENCY:
            out[f"{way}_c{c}_over_limit"] = by[(way, None, None, c)]["texts_per_s"] / limit["texts_per_s"]
    peer = [r for r in best_rows if r["way"] == "peer"]
    if not peer:
        return out
    top = max((r for r in peer if r["concurrency"] == 8), key=lambda r: r["texts_per_s"])
    quick = min((r for r in peer if r["concurrency"] == 1), key=lambda r: r["p50_ms"])
    out |= {"peer_c8_engine": top["engine"], "peer_c8_texts_per_s": top["texts_per_s"]}
    out |= {"peer_c1_engine": quick["engine"], "peer_c1_p50_ms": quick["p50_ms"]}
    for way in ours:
        out[f"{way}_c8_over_peer"] = by[(way, None, None, 8)]["texts_per_s"] / top["texts_per_s"]
        out[f"{way}_c1_p50_over_peer"] = by[(way, None, None, 1)]["p50_ms"] / quick["p50_ms"]
    return out


def goals(ratio: dict) -> list[tuple[str, str, float, bool]]:
    """(what, the goal, the ratio measured, met) for each goal the record has the cells of."""
    whats = {
        "c8_over_limit": "c8 / in-process limit",
        "c8_over_peer": f"c8 / peer c8 ({ratio.get('peer_c8_engine')})",
        "c1_p50_over_peer": f"c1 p50 / peer c1 p50 ({ratio.get('peer_c1_engine')})",
    }
    out = []
    for key, what in whats.items():
        goal, at_most = GOALS[key], key.startswith("c1_p50")
        for way, name in OURS.items():
            if f"{way}_{key}" in ratio:
                value = ratio[f"{way}_{key}"]
                met = value <= goal if at_most else value >= goal
                out.append((f"{name} {what}", f"{'≤' if at_most else '≥'} {goal:.2f}×", value, met))
    return out


def cell_name(row: dict) -> str:
    if row["way"] == "in-process":
        return f"in-process, {row['batch']} a call"
    where = {**OURS, "peer": f"infinity-emb ({row['engine']})"}
    return f"{where[row['way']]} c{row['concurrency']}"


def render(best_rows: list[dict], ratio: dict) -> str:
    lines = ["| cell | texts/s | p50 ms | p90 ms | p99 ms | server CPU ms/text |", "|---|---:|---:|---:|---:|---:|"]
    for r in best_rows:
        cpu = (r.get("server_cpu_s") or 0) + (r.get("gateway_cpu_s") or 0)
        shown = f"{1000 * cpu / r['texts']:.2f}" if r.get("server_cpu_s") is not None else ""
        lines.append(
            f"| {cell_name(r)} | {r['texts_per_s']:.1f} | {r['p50_ms']:.2f} | {r['p90_ms']:.2f} | {r['p99_ms']:.2f} "
            f"| {shown} |"
        )
    lines += ["", "| ratio | goal | measured | met |", "|---|---|---:|---|"]
    lines += [
        f"| {what} | {goal} | {value:.2f}× | {'yes' if met else 'no'} |" for what, goal, value, met in goals(ratio)
    ]
    return "\n".join(lines)


def _print(r: dict) -> None:
    print(
        f"round {r['round']} {cell_name(r):<32}: {r['texts_per_s']:8.1f} texts/s, p50 {r['p50_ms']:7.2f} ms, "
        f"p99 {r['p99_ms']:7.2f} ms, load average {r['load_average']}",
        flush=True,
    )


def run(
    out: Path | None,
    *,
    rounds: int = ROUNDS,
    duration_s: float = DURATION_S,
    warmup_s: float = 1.0,
    texts: list[str] | None = None,
    peer_python: str | None = None,
    engines: tuple[str, ...] = ENGINES,
) -> dict:
    """The whole benchmark: model, peer, cells, tables printed, record written to `out` (None: not written)."""
    machine = machine_info()  # now: its load average is the one at the start
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ernie-deploy-embed-") as work:
        work = Path(work)
        source = "given"
        if texts is None:
            texts, source = bench_texts(128)
        repo, model = build_model(work, texts)
        peer, peer_facts = None, {}
        if peer_python:
            folder = work / "peer" / "model"
            peer_facts = {"python": peer_python, "engines": list(engines), "versions": peer_versions(peer_python)}
            peer_facts["model"] = build_peer_model(peer_python, folder, model["max_seq_len"], "optimum" in engines)
            peer = {"python": peer_python, "folder": folder, "engines": engines}
        measured = measure(work, repo, texts, peer=peer, rounds=rounds, duration_s=duration_s, warmup_s=warmup_s)
    kept = best(measured["rows"])
    ratio = ratios(kept)
    record = {
        **run_record(measured["rows"]),
        "machine": machine,
        "loadavg_end": loadavg(),
        "cores": sorted(os.sched_getaffinity(0)),
        "versions": package_versions(),
        "model": model,
        "peer": peer_facts,
        "texts": {"source": source, "count": len(texts), "mean_chars": sum(map(len, texts)) / len(texts)},
        "cells": {"rounds": rounds, "duration_s": duration_s, "warmup_s": warmup_s, "checked": CHECKED},
        "facts": measured["facts"],
        "skipped": measured["skipped"],
        "best": kept,
        "ratios": ratio,
        "goals": GOALS,
        "seconds": time.perf_counter() - t0,
    }
    if out is not None:
        write_json(record, out)
    print(render(kept, ratio))
    return record


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.embed", description=__doc__.split("\n\n")[0], allow_abbrev=False
    )
    p.add_argument("--out", default="docs/embed.json", help="the results file (default docs/embed.json)")
    p.add_argument("--rounds", type=int, default=ROUNDS, help=f"rounds of every cell (default {ROUNDS})")
    p.add_argument("--duration", type=float, default=DURATION_S, help=f"seconds per cell (default {DURATION_S})")
    p.add_argument(
        "--peer-python",
        help="the python of a virtual environment holding infinity-emb (see this module's docstring); without it the "
        "peer's cells are skipped",
    )
    p.add_argument(
        "--peer-engines",
        default=",".join(ENGINES),
        help=f"infinity-emb's engines to measure, comma-separated (default {','.join(ENGINES)})",
    )
    args = p.parse_args(argv)
    engines = tuple(e for e in args.peer_engines.split(",") if e)
    unknown = sorted(set(engines) - set(ENGINES))
    if unknown:
        p.error(f"unknown engine(s) {', '.join(unknown)}: choose among {', '.join(ENGINES)}")
    run(Path(args.out), rounds=args.rounds, duration_s=args.duration, peer_python=args.peer_python, engines=engines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
