"""`ernie-deploy long-texts`: moved. NER on documents longer than the model's window, cut and in windows, is one of
this repository's own benchmarks (benchmarks/long_text.py), run from a checkout with `bash scripts/bench.sh
long-texts`. The command still parses its options for one release, to name that command instead of failing on them."""

from __future__ import annotations

import argparse

from ernie_deploy.core.errors import BadOptionsError

NEW = "bash scripts/bench.sh long-texts"


def register(sub) -> None:
    p = sub.add_parser("long-texts", help=f"moved: run `{NEW}` from a checkout of ernie-deploy")
    hidden = argparse.SUPPRESS
    for flag in ("--model", "--name", "--static", "--onnx", "--report"):
        p.add_argument(flag, help=hidden)
    p.add_argument("--window-size", type=int, help=hidden)
    p.add_argument("--window-stride", type=int, help=hidden)
    p.add_argument("--sweep", type=int, nargs="*", default=[], help=hidden)
    p.add_argument("--no-served", action="store_true", help=hidden)
    p.set_defaults(func=run)


def run(args) -> None:
    raise BadOptionsError(
        "`ernie-deploy long-texts` measured this repository's own benchmark, which left the package for benchmarks/ "
        "in the source tree (not installed with ernie-deploy)",
        f"from a checkout of ernie-deploy, run `{NEW}` with the same options (or `python -m benchmarks long-texts "
        "...` from its root)",
    )
