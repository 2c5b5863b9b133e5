"""`ernie-deploy bench`: served pipeline vs in-process onnxruntime, Paddle and the classic layout."""

from __future__ import annotations

from ernie_deploy.core.tasks import TASKS


def register(sub) -> None:
    from ernie_deploy.bench.run import add_arguments

    p = sub.add_parser("bench", help="throughput and latency: served pipeline vs in-process onnxruntime, Paddle "
                                     "and the classic layout; writes BENCHMARKS.md, bench.json, bench.png")
    add_arguments(p, sorted(TASKS))
    p.set_defaults(func=run)


def run(args) -> None:
    from ernie_deploy.bench.run import run_from_args

    run_from_args(args)
