"""`python -m ernie_deploy.cli.ship TASK [TASK ...] [--table]`: write the demo models trained on this machine into
demo/<task>/ with their manifests (ernie_deploy.pipeline.ship), each scored on its test split as `ernie-deploy eval`
scores it (a retrieval kind: as its client scores it), and render the shipped models' table in docs/CONVERT.md."""

from __future__ import annotations

import argparse
import sys

from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.tasks import get_task
from ernie_deploy.evaluate.retrieval_offline import evaluate
from ernie_deploy.pipeline.ship import TABLE_PAGE, ship, write_table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument(
        "task", nargs="*", help="the tasks whose demo models to ship, bases before the tasks they start"
    )
    parser.add_argument("--table", action="store_true", help=f"then render the shipped models' table in {TABLE_PAGE}")
    args = parser.parse_args(argv)
    try:
        for name in args.task:
            ship(get_task(name), evaluate)
        if args.table:
            write_table()
    except ErnieDeployError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
