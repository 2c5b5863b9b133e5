"""`python -m ernie_deploy.cli.parse_only ARGS`: the command line `ernie-deploy ARGS` parsed as the command parses it,
and nothing run. Exit status 0 when it parses, 2 with argparse's message when it does not; an old spelling prints
its deprecation line as it would.

The scripts (scripts/*.sh) check their arguments this way when the environment sets ERNIE_DEPLOY_PARSE_ONLY=1: they
parse them as a run would, then exit 0 when they are fine or 2 with the usual message, before making .venv,
installing, downloading or writing anything. tests/test_docs_commands.py checks every command the docs show so."""

from __future__ import annotations

import os
import sys

from ernie_deploy.cli import build_parser

ENV = "ERNIE_DEPLOY_PARSE_ONLY"


def parse_only() -> bool:
    """Whether this process only parses its arguments (ERNIE_DEPLOY_PARSE_ONLY=1)."""
    return os.environ.get(ENV) == "1"


def main(argv: list[str] | None = None) -> int:
    build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
