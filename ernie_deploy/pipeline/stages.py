"""The first two stages over a named model: `fetch_model` (a checkpoint from a URL, a local path or the offline
bootstrap) and `export_model` (checkpoint -> Paddle static model, with the model's record, model.json)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ernie_deploy.core.errors import BadOptionsError
from ernie_deploy.core.files import atomic_path, write_json
from ernie_deploy.core.paths import artifact_dir
from ernie_deploy.core.tasks import get_task
from ernie_deploy.export.static import StaticModel, export
from ernie_deploy.fetch.checkpoints import inspect_checkpoint, resolve_checkpoint
from ernie_deploy.fetch.datasets import prepare
from ernie_deploy.pipeline.locate import DEFAULT_TASK, FETCH_RECORD, artifact_name, check_heads, checkpoint_task
from ernie_deploy.pipeline.options import ExportOptions, FetchOptions
from ernie_deploy.train.bootstrap import train

Log = Callable[[str], None]


def _quiet(line: str) -> None:
    pass


@dataclass(frozen=True)
class Fetched:
    path: Path  # the checkpoint folder
    kind: str  # what it holds: fetch.checkpoints.Checkpoint.kind


def fetch_model(
    task: str | None, name: str | None, options: FetchOptions, *, out: str | Path | None = None, log: Log = _quiet
) -> Fetched:
    """Materialise model `name`'s checkpoint (default: the task's demo model) at `out`, else
    artifacts/checkpoints/<name or task>, from `options.source` or the bootstrap. The task, where given (a
    bootstrap's always is), is recorded beside it (locate.FETCH_RECORD) for the later stages; a given task that the
    class the checkpoint's config names does not serve is refused before anything is written."""

    spec = get_task(task or DEFAULT_TASK)
    out = Path(out or artifact_dir("checkpoints", artifact_name(spec.name, name)))
    if options.bootstrap:
        recipe = {"budget_minutes": options.budget} if options.budget is not None else None
        trained = train(spec, prepare(spec.dataset), force=options.force, recipe=recipe, retrain=options.train)
        checkpoint = inspect_checkpoint(trained)
    elif options.source:
        checkpoint = resolve_checkpoint(options.source, sha256=options.sha256, workdir=out.parent)
        if task:
            check_heads(spec, checkpoint)
    else:
        raise BadOptionsError("nothing to fetch", "pass a URL (with --sha256), a local path, or --bootstrap")
    _copy_checkpoint(checkpoint, out, spec.name if task or options.bootstrap else None)
    log(f"{name or spec.name}: {checkpoint.kind} checkpoint at {out}")
    return Fetched(out, checkpoint.kind)


def _copy_checkpoint(checkpoint, out: Path, task: str | None) -> None:
    """The checkpoint's folder copied to `out` whole or not at all, with the task it was fetched for, where given."""
    with atomic_path(out) as tmp:
        shutil.copytree(checkpoint.root, tmp)
        # A static model may keep its vocabulary and configs in the folder above it: they travel with it
        # (lowercasing, the model's positions and its label names are read from them later).
        for file in ("vocab.txt", "tokenizer_config.json", "config.json"):
            source = Path(checkpoint.vocab_file).parent / file
            if not (tmp / file).exists() and source.is_file():
                shutil.copy2(source, tmp / file)
        if task:
            write_json({"task": task}, tmp / FETCH_RECORD)


def export_model(
    task: str | None,
    name: str | None,
    options: ExportOptions,
    *,
    checkpoint: str | Path | None = None,
    out: str | Path | None = None,
    log: Log = _quiet,
) -> StaticModel:
    """Export model `name`'s checkpoint (default: artifacts/checkpoints/<name or task>) to a static model at `out`
    (default: artifacts/static/<name or task>), its record (model.json) beside it for the later stages. `task`: the
    one fetch recorded beside the checkpoint, else the one its config's class serves, where not given
    (locate.checkpoint_task)."""

    folder = artifact_name(task, name)
    found = inspect_checkpoint(Path(checkpoint or artifact_dir("checkpoints", folder)))
    task = checkpoint_task(task, found)  # what fetch recorded, or the checkpoint's class says, where not given
    labels = json.loads(Path(options.labels).read_text()) if options.labels else None
    static = export(
        found,
        task,
        out or artifact_dir("static", folder),
        labels=labels,
        max_seq_len=options.max_seq_len,
        ner_decoding=options.ner_decoding,
        name=name,
        pooling=options.pooling,
        score=options.score,
    )
    decoding = f", NER decoding {static.ner_decoding}" if static.ner_decoding else ""
    log(f"{name or task.name}: static model {static.model_file} (max_seq_len {static.max_seq_len}{decoding})")
    return static
