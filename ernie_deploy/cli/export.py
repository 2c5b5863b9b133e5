"""`ernie-deploy export`: checkpoint -> Paddle static inference model."""

from __future__ import annotations

import json
from pathlib import Path

from ernie_deploy.cli.inputs import DEFAULT_TASK
from ernie_deploy.core.layout import artifact_dir
from ernie_deploy.core.tasks import TASKS, get_task


def register(sub) -> None:
    p = sub.add_parser("export", help="checkpoint -> Paddle static inference model")
    p.add_argument("--task", default=DEFAULT_TASK, choices=sorted(TASKS))
    p.add_argument("--checkpoint", help="default: artifacts/checkpoints/<task>")
    p.add_argument("--labels", help="JSON list of label names, when the checkpoint config has none")
    p.add_argument("--out", help="default: artifacts/static/<task>")
    p.set_defaults(func=run)


def run(args) -> None:
    from ernie_deploy.export.static import export
    from ernie_deploy.fetch.checkpoints import inspect_checkpoint

    task = get_task(args.task)
    checkpoint = inspect_checkpoint(Path(args.checkpoint or artifact_dir("checkpoints", task.name)))
    labels = json.loads(Path(args.labels).read_text()) if args.labels else None
    static = export(checkpoint, task, args.out or artifact_dir("static", task.name), labels=labels)
    print(f"{task.name}: static model {static.model_file}")
