"""`ernie-deploy export`: checkpoint -> Paddle static inference model."""

from __future__ import annotations

from ernie_deploy.cli.arguments import add_kind_exports, add_model
from ernie_deploy.cli.inputs import DEFAULT_TASK, MAX_SEQ_LEN_HELP, options_from
from ernie_deploy.core.tasks import TASKS
from ernie_deploy.pipeline.options import ExportOptions
from ernie_deploy.pipeline.stages import export_model
from ernie_deploy.serving.entities import DECODINGS


def register(sub) -> None:
    p = sub.add_parser("export", help="checkpoint -> Paddle static inference model")
    p.add_argument(
        "--task",
        choices=sorted(TASKS),
        help="default: the task `fetch` recorded beside the checkpoint, else the one its config's architectures "
        f"serve, else {DEFAULT_TASK}; one that contradicts either is refused",
    )
    add_model(p)
    p.add_argument("--checkpoint", help="default: artifacts/checkpoints/<model or task>")
    p.add_argument("--labels", help="JSON list of label names, when the checkpoint config has none")
    p.add_argument("--out", help="default: artifacts/static/<model or task>")
    p.add_argument(
        "--max-seq-len",
        type=int,
        help=MAX_SEQ_LEN_HELP,
    )
    p.add_argument(
        "--ner-decoding",
        choices=DECODINGS,
        help="token models: how logits become entities, recorded with the model for `build`: constrained (the "
        "default: the best valid IOB2 sequence) or argmax (each token's best label, read as PaddleNLP's own "
        "pipeline reads it: use it for the same entities as PaddleNLP)",
    )
    add_kind_exports(p)
    p.set_defaults(func=run)


def options(args) -> ExportOptions:
    """The command's options, from its parsed flags (a deployment file's `export:` fills the same object)."""
    return options_from(ExportOptions, args)


def run(args) -> None:

    export_model(args.task, args.model, options(args), checkpoint=args.checkpoint, out=args.out, log=print)
