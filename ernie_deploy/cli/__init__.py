"""`ernie-deploy`: one subcommand per stage of checkpoint -> static model -> ONNX -> repository -> server -> report.

One module per command, each turning its flags into typed options for a library call.
Imports: any package; the library imports nothing from here.
"""

from __future__ import annotations

import argparse

from ernie_deploy.cli import (
    add,
    apply,
    bench,
    build,
    check,
    convert,
    dashboard,
    data,
    evaluate,
    export,
    fetch,
    gateway,
    long_texts,
    manifests,
    probe,
    rollout,
    serve,
    soak,
    stats,
    tune,
)
from ernie_deploy.cli.arguments import exact_parser
from ernie_deploy.cli.dispatch import run_command

# In the order `ernie-deploy --help` lists them: a checkpoint to a served model in one run, the pipeline's stages,
# then operations and measurement.
COMMANDS = (
    add,
    data,
    fetch,
    export,
    convert,
    build,
    apply,
    serve,
    gateway,
    rollout,
    check,
    soak,
    probe,
    stats,
    long_texts,
    manifests,
    dashboard,
    evaluate,
    bench,
    tune,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ernie-deploy", description=__doc__.splitlines()[0], allow_abbrev=False)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=exact_parser)
    for command in COMMANDS:
        command.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    return run_command(build_parser().parse_args(argv))
