"""`ernie-deploy fetch`: a checkpoint from a URL (sha256-pinned), a local path, or the offline bootstrap."""

from __future__ import annotations

import shutil
from pathlib import Path

from ernie_deploy.cli.inputs import DEFAULT_TASK, NAME_HELP, artifact_name
from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.files import atomic_path
from ernie_deploy.core.layout import artifact_dir
from ernie_deploy.core.tasks import TASKS, get_task


def register(sub) -> None:
    p = sub.add_parser("fetch", help="obtain a checkpoint: URL (+ --sha256), local path, or --bootstrap")
    p.add_argument("source", nargs="?", help="http(s) URL of an archive, or a local directory/archive")
    p.add_argument("--sha256", help="required with a URL: the archive's pinned sha256")
    p.add_argument("--bootstrap", action="store_true", help="train a small ERNIE offline on the task's data (cached)")
    p.add_argument("--force", action="store_true", help="retrain the bootstrap model even if cached")
    p.add_argument(
        "--budget",
        type=float,
        metavar="MINUTES",
        help="with --bootstrap: train for this many minutes on every train row instead of the task's fixed "
        "rows and epochs (more time, a better model; the best dev checkpoint is kept)",
    )
    p.add_argument("--task", default=DEFAULT_TASK, choices=sorted(TASKS))
    p.add_argument("--name", help=NAME_HELP)
    p.add_argument("--out", help="checkpoint folder (default: artifacts/checkpoints/<name or task>)")
    p.set_defaults(func=run)


def run(args) -> None:
    """Materialise a checkpoint at artifacts/checkpoints/<name or task> from a URL, a local path, or the bootstrap."""
    from ernie_deploy.fetch.checkpoints import inspect_checkpoint, resolve_checkpoint

    task = get_task(args.task)
    out = Path(args.out or artifact_dir("checkpoints", artifact_name(task.name, args.name)))
    if args.bootstrap:
        from ernie_deploy.fetch.datasets import prepare
        from ernie_deploy.train.bootstrap import train

        recipe = {"budget_minutes": args.budget} if args.budget is not None else None
        source = train(task, prepare(task.dataset), force=args.force, recipe=recipe)
        checkpoint = inspect_checkpoint(source)
    elif args.budget is not None:
        raise ErnieDeployError("--budget is the training time of --bootstrap", "add --bootstrap, or drop --budget")
    elif args.source:
        checkpoint = resolve_checkpoint(args.source, sha256=args.sha256, workdir=out.parent)
    else:
        raise ErnieDeployError("nothing to fetch", "pass a URL (with --sha256), a local path, or --bootstrap")
    with atomic_path(out) as tmp:
        shutil.copytree(checkpoint.root, tmp)
        # A static model may keep its vocabulary and configs in the folder above it: they travel with it
        # (lowercasing, the model's positions and its label names are read from them later).
        for name in ("vocab.txt", "tokenizer_config.json", "config.json"):
            source = Path(checkpoint.vocab_file).parent / name
            if not (tmp / name).exists() and source.is_file():
                shutil.copy2(source, tmp / name)
    print(f"{args.name or task.name}: {checkpoint.kind} checkpoint at {out}")
