"""`ernie-deploy apply deploy.yaml`: rebuild a repository from a deployment file (ernie_deploy.repository.deployment).

Each model goes through the same commands a user would type (fetch, export, convert), then one `build` writes
them all and models the file no longer lists are removed, so the repository holds exactly what the file says.
A stage's options in the file are that command's flags; they are checked against the command before any work.
"""

from __future__ import annotations

import argparse
import shlex

from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.tasks import get_task

# Flags apply sets itself from the model's fields; the file may not set them per stage.
_RESERVED = {"name", "task", "source", "sha256", "bootstrap", "out", "checkpoint", "static", "onnx", "repository"}


def register(sub) -> None:
    p = sub.add_parser(
        "apply",
        help="rebuild a repository from a deployment file: fetch, export, convert and build every model it lists",
        description=__doc__.splitlines()[0],
    )
    p.add_argument("file", help="the deployment file (YAML; format in ernie_deploy/repository/deployment.py)")
    p.add_argument("--dry-run", action="store_true", help="check the file and print the commands; run nothing")
    p.add_argument("--keep-others", action="store_true", help="leave models the file does not list in the repository")
    # The other commands, by name: `sub` holds every one of them by the time this command runs. Taken from here
    # rather than from ernie_deploy.cli, which imports this module to register it.
    p.set_defaults(func=lambda args: run(args, sub.choices))


def _flags(parser: argparse.ArgumentParser, where: str, options: dict) -> list[str]:
    """A stage's options from the file -> that command's flags, each checked against the command's parser."""
    known = {a.dest: a for a in parser._actions if a.option_strings}
    argv = []
    for key, value in options.items():
        dest = key.replace("-", "_")
        if dest in _RESERVED:
            raise ErnieDeployError(f"{where}.{key}: is set by apply from the model's fields", f"remove {key}")
        action = known.get(dest)
        if action is None:
            raise ErnieDeployError(
                f"{where}.{key}: `{parser.prog}` has no such option",
                f"use one of: {', '.join(sorted(d for d in known if d not in _RESERVED and d != 'help'))}",
            )
        flag = action.option_strings[-1]
        if action.nargs == 0:  # a switch
            if not isinstance(value, bool):
                raise ErnieDeployError(f"{where}.{key}: is a switch, got {value!r}", "write true or false")
            argv += [flag] if value else []
            continue
        if action.choices is not None and str(value) not in map(str, action.choices):
            raise ErnieDeployError(
                f"{where}.{key}: {value!r} is not one of {', '.join(map(str, action.choices))}", "pick one of them"
            )
        argv += [flag, str(value)]
    return argv


def commands(deployment, subparsers: dict[str, argparse.ArgumentParser]) -> list[list[str]]:
    """The command lines that carry out the deployment file, checked, in order."""
    # The parity check of convert reads the task's test split.
    datasets = sorted({get_task(m.task).dataset for m in deployment.models})
    plan = [["fetch-data", *(a for d in datasets for a in ("--dataset", d))]]
    for i, model in enumerate(deployment.models):
        where = f"models[{i}]"
        opts = {
            stage: _flags(subparsers[stage], f"{where}.{stage}", model.options.get(stage, {}))
            for stage in ("fetch", "export", "convert")
        }
        source = ["--bootstrap"] if model.source == "bootstrap" else [model.source]
        sha = ["--sha256", model.sha256] if model.sha256 else []
        plan.append(["fetch", *source, *sha, "--task", model.task, "--name", model.name, *opts["fetch"]])
        plan.append(["export", "--task", model.task, "--name", model.name, *opts["export"]])
        plan.append(["convert", "--name", model.name, *opts["convert"]])
    names = [a for m in deployment.models for a in ("--name", m.name)]
    build = _flags(subparsers["build"], f"{deployment.path.name}: build", deployment.build)
    plan.append(["build", "--repository", str(deployment.repository), *names, *build])
    return plan


def run(args, subparsers: dict[str, argparse.ArgumentParser]) -> None:
    """Carry out the deployment file with the commands in `subparsers` (command name -> its parser)."""
    from ernie_deploy.cli.dispatch import run_command
    from ernie_deploy.repository.build import remove
    from ernie_deploy.repository.deployment import load_deployment
    from ernie_deploy.repository.served import served_models

    deployment = load_deployment(args.file)
    plan = commands(deployment, subparsers)
    listed = {m.name for m in deployment.models}
    stale = [] if args.keep_others else sorted(set(served_models(deployment.repository)) - listed)
    for argv in plan:
        print(f"==> ernie-deploy {shlex.join(argv)}", flush=True)
        if not args.dry_run and run_command(_parse(subparsers, argv)) != 0:
            raise ErnieDeployError(
                f"`ernie-deploy {argv[0]}` failed for {args.file} (its message is above)",
                "fix what it names and run apply again; the repository was left as it was",
            )
    if stale:
        print(f"==> removing models {args.file} no longer lists: {', '.join(stale)}", flush=True)
        if not args.dry_run:
            remove(deployment.repository, stale)
    print(f"{deployment.repository}: {', '.join(sorted(listed))}" + (" (dry run)" if args.dry_run else ""))


def _parse(subparsers: dict[str, argparse.ArgumentParser], argv: list[str]) -> argparse.Namespace:
    """`ernie-deploy <argv>` parsed as the entry point parses it: by the command's own parser, named."""
    args = subparsers[argv[0]].parse_args(argv[1:])
    args.command = argv[0]
    return args
