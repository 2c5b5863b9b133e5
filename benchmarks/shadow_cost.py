"""What a shadow evaluation (`rollout --shadow`) costs the serving version: its latency at concurrency 1 (p50) and
its throughput at concurrency 8, with the shadow on at a fraction (default core.shadow.DEFAULT_FRACTION) and off,
on one server in one run.

The repository must hold the model at its serving version and at the candidate version (`ernie-deploy build --model
NAME --version N`); a copy of it is served, so the original is never edited. The candidate is loaded beside the
serving version (as `rollout` loads it) for every cell, so "off" and "on" differ only by the mirroring. Cells
alternate off, on, off, on so that a drift of the machine shows as a difference between rounds, not as the cost.

    python -m benchmarks.shadow_cost --repository models --model ernie_seqcls --to 2 [--fraction 0.1] [--out f.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
from pathlib import Path

from ernie_deploy.bench.load import prepare_requests, run_load
from ernie_deploy.client.admin import RepositoryAdmin
from ernie_deploy.client.metrics import scrape, shadow_summary
from ernie_deploy.core.shadow import DEFAULT_FRACTION
from ernie_deploy.core.tasks import get_task
from ernie_deploy.fetch.data import data_dir, read_split_file, split_file
from ernie_deploy.server.process import TritonServer

ROUNDS = 2
DURATION_S = 10.0
TEXTS = 400


def run_shadow_cost(
    repository: Path,
    name: str,
    to_version: int,
    texts: list[str],
    *,
    fraction: float = DEFAULT_FRACTION,
    duration_s: float = DURATION_S,
    rounds: int = ROUNDS,
) -> dict:
    from ernie_deploy.operate.rollout import PROBE_TEXTS, Move, canary_probe
    from ernie_deploy.operate.shadow import shadow_off, shadow_on, shadow_step

    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "models"
        shutil.copytree(repository, copy)
        with TritonServer(copy, http_port=0, grpc_port=0, metrics_port=0, log_file=Path(tmp) / "server.log") as srv:
            with RepositoryAdmin(srv.grpc_url) as admin:
                move = Move.begin(copy, name, to_version, admin)
                shadow = shadow_step(move, move.served, fraction)
                move.load_candidate(canary_probe(srv.grpc_url), PROBE_TEXTS)
                requests = prepare_requests(move.served.task_spec, texts, 1)
                cells = []
                try:
                    for round_ in range(rounds):
                        for mode in ("off", "on"):
                            (shadow_on if mode == "on" else shadow_off)(move, shadow)
                            before = shadow_summary(scrape(srv.metrics_url), name, move.current, shadow.candidate)
                            c1 = run_load(srv.grpc_url, move.served, requests, 1, duration_s=duration_s)
                            c8 = run_load(srv.grpc_url, move.served, requests, 8, duration_s=duration_s)
                            after = shadow_summary(scrape(srv.metrics_url), name, move.current, shadow.candidate)
                            counted = after.since(before)
                            cells.append(
                                {
                                    "round": round_,
                                    "shadow": mode,
                                    "c1_p50_ms": round(statistics.median(c1.latencies_s) * 1e3, 3),
                                    "c8_per_s": round(c8.sequences / c8.seconds, 1),
                                    "c8_p50_ms": round(statistics.median(c8.latencies_s) * 1e3, 3),
                                    "errors": c1.errors + c8.errors,
                                    "mirrored": counted.compared + counted.skipped,
                                    "skipped": counted.skipped,
                                    "agreement": counted.agreement,
                                }
                            )
                            print(json.dumps(cells[-1]), flush=True)
                finally:
                    shadow_off(move, shadow, quiet=True)
                    move.undo()
    return {"model": name, "serving": move.current, "candidate": to_version, "fraction": fraction, "cells": cells}


def summarise(result: dict) -> dict:
    def mean(mode: str, key: str) -> float:
        return statistics.mean(c[key] for c in result["cells"] if c["shadow"] == mode)

    out = {}
    for key in ("c1_p50_ms", "c8_per_s", "c8_p50_ms"):
        off, on = mean("off", key), mean("on", key)
        out[key] = {"off": round(off, 3), "on": round(on, 3), "on/off": round(on / off, 3)}
    return out


def main(argv: list[str] | None = None) -> int:
    from ernie_deploy.repository.served import served_model

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("--repository", required=True, type=Path)
    p.add_argument("--model", required=True)
    p.add_argument("--to", type=int, required=True)
    p.add_argument("--fraction", type=float, default=DEFAULT_FRACTION)
    p.add_argument("--duration", type=float, default=DURATION_S, help="seconds per cell")
    p.add_argument("--rounds", type=int, default=ROUNDS, help="alternating off/on rounds (default %(default)s)")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    task = get_task(served_model(args.repository, args.model).task)
    texts, _ = read_split_file(split_file(data_dir(task.dataset), "test", task.split_format))
    result = run_shadow_cost(
        args.repository,
        args.model,
        args.to,
        list(texts[:TEXTS]),
        fraction=args.fraction,
        duration_s=args.duration,
        rounds=args.rounds,
    )
    result["summary"] = summarise(result)
    print(json.dumps(result["summary"], indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
