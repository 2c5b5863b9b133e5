"""`ernie-deploy fetch`: a checkpoint from a URL (sha256-pinned), a local path, or the offline bootstrap."""

from __future__ import annotations

from ernie_deploy.cli.arguments import add_model
from ernie_deploy.cli.inputs import DEFAULT_TASK, options_from
from ernie_deploy.core.tasks import TASKS
from ernie_deploy.pipeline.options import FetchOptions
from ernie_deploy.pipeline.stages import fetch_model


def register(sub) -> None:
    p = sub.add_parser("fetch", help="obtain a checkpoint: URL (+ --sha256), local path, or --bootstrap")
    p.add_argument("source", nargs="?", help="http(s) URL of an archive, or a local directory/archive")
    p.add_argument("--sha256", help="required with a URL: the archive's pinned sha256")
    p.add_argument(
        "--bootstrap",
        action="store_true",
        help="the task's demo model: the checkpoint the repository ships (demo/<task>, sha256-checked)",
    )
    p.add_argument(
        "--train",
        action="store_true",
        help="with --bootstrap: train it on this machine with the recipe that made the shipped one (cached after)",
    )
    p.add_argument("--force", action="store_true", help="with --bootstrap: train it again even if cached")
    p.add_argument(
        "--budget",
        type=float,
        metavar="MINUTES",
        help="with --bootstrap: train for this many minutes on every train row instead of the task's fixed "
        "rows and epochs (more time, a better model; the best dev checkpoint is kept)",
    )
    p.add_argument(
        "--task",
        choices=sorted(TASKS),
        help="what the model does, recorded beside the checkpoint for `export` (refused where the checkpoint's "
        f"config names a class of another task); default: {DEFAULT_TASK}'s demo model with --bootstrap, else "
        "left to `export`",
    )
    add_model(p)
    p.add_argument("--out", help="checkpoint folder (default: artifacts/checkpoints/<model or task>)")
    p.set_defaults(func=run)


def options(args) -> FetchOptions:
    """The command's options, from its parsed flags (a deployment file's `fetch:` fills the same object)."""
    return options_from(FetchOptions, args)


def run(args) -> None:
    """Materialise a checkpoint at artifacts/checkpoints/<model or task> from a URL, a local path, or the bootstrap."""

    fetch_model(args.task, args.model, options(args), out=args.out, log=print)
