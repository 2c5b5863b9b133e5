"""`ernie-deploy apply deploy.yaml`: rebuild a repository from a deployment file (ernie_deploy.repository.deployment).

Each model goes through fetch, export and convert, then one build writes them all and models the file no longer
lists are removed, so the repository holds exactly what the file says (ernie_deploy.pipeline.deploy). A stage's
options in the file are the fields of the options that command's flags fill; every one is checked before any work.
"""

from __future__ import annotations

from ernie_deploy.cli.arguments import add_repository
from ernie_deploy.repository.deployment import load_deployment


def register(sub) -> None:
    p = sub.add_parser(
        "apply",
        help="rebuild a repository from a deployment file: fetch, export, convert and build every model it lists",
        description=__doc__.splitlines()[0],
    )
    p.add_argument("file", help="the deployment file (YAML; format in ernie_deploy/repository/deployment.py)")
    add_repository(
        p, "the repository to rebuild, instead of the file's `repository:` (default: the file's)", default=None
    )
    p.add_argument(
        "--dry-run", action="store_true", help="check the file and print the plan (each model's stages); run nothing"
    )
    p.add_argument("--keep-others", action="store_true", help="leave models the file does not list in the repository")
    p.set_defaults(func=run)


def run(args) -> None:
    from dataclasses import replace
    from pathlib import Path

    from ernie_deploy.pipeline.deploy import deploy

    deployment = load_deployment(args.file)
    if args.repository is not None:
        deployment = replace(deployment, repository=Path(args.repository))
    plan = deploy(
        deployment, keep_others=args.keep_others, dry_run=args.dry_run, log=lambda line: print(line, flush=True)
    )
    listed = ", ".join(sorted(plan.names))
    print(f"{plan.deployment.repository}: {listed}" + (" (dry run)" if args.dry_run else ""))
