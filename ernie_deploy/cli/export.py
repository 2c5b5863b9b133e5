"""`ernie-deploy export`: checkpoint -> Paddle static inference model."""

from __future__ import annotations

import json
from pathlib import Path

from ernie_deploy.cli.inputs import DEFAULT_TASK, NAME_HELP, artifact_name
from ernie_deploy.core.layout import artifact_dir
from ernie_deploy.core.tasks import TASKS, get_task
from ernie_deploy.serving.entities import DECODINGS


def register(sub) -> None:
    p = sub.add_parser("export", help="checkpoint -> Paddle static inference model")
    p.add_argument("--task", default=DEFAULT_TASK, choices=sorted(TASKS))
    p.add_argument("--name", help=NAME_HELP)
    p.add_argument("--checkpoint", help="default: artifacts/checkpoints/<name or task>")
    p.add_argument("--labels", help="JSON list of label names, when the checkpoint config has none")
    p.add_argument("--out", help="default: artifacts/static/<name or task>")
    p.add_argument(
        "--max-seq-len",
        type=int,
        help="the longest input in tokens, [CLS] and [SEP] included, that convert, build and serve tokenize to "
        "(default: the task's 128, at most the model's max_position_embeddings)",
    )
    p.add_argument(
        "--ner-decoding",
        choices=DECODINGS,
        help="token models: how logits become entities, recorded with the model for `build`: constrained (the "
        "default: the best valid IOB2 sequence) or argmax (each token's best label, read as PaddleNLP's own "
        "pipeline reads it: use it for the same entities as PaddleNLP)",
    )
    p.set_defaults(func=run)


def run(args) -> None:
    from ernie_deploy.export.static import export
    from ernie_deploy.fetch.checkpoints import inspect_checkpoint

    task = get_task(args.task)
    folder = artifact_name(task.name, args.name)
    checkpoint = inspect_checkpoint(Path(args.checkpoint or artifact_dir("checkpoints", folder)))
    labels = json.loads(Path(args.labels).read_text()) if args.labels else None
    out = args.out or artifact_dir("static", folder)
    static = export(
        checkpoint,
        task,
        out,
        labels=labels,
        max_seq_len=args.max_seq_len,
        ner_decoding=args.ner_decoding,
        name=args.name,
    )
    decoding = f", NER decoding {static.ner_decoding}" if static.ner_decoding else ""
    print(f"{args.name or task.name}: static model {static.model_file} (max_seq_len {static.max_seq_len}{decoding})")
