"""Ship demo models with the repository (the command: `python -m ernie_deploy.cli.ship TASK [TASK ...]`).

For each task: its bootstrap checkpoint trained on this machine with the task's recipe (trained first if the cache
lacks it: `python -m ernie_deploy.train.bootstrap TASK --train`), exported and converted as the pipeline does, its test
split scored by the Paddle and the ONNX model as `ernie-deploy eval` scores them, then written to demo/<task>/ with its
manifest (ernie_deploy.fetch.shipped): the sha256 of every file, the cache key, the command, seed and data that made
it, and its dev and test scores.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ernie_deploy.core.files import staging_dir
from ernie_deploy.core.paths import artifacts_dir
from ernie_deploy.core.tasks import TaskSpec, get_task
from ernie_deploy.export.static import StaticModel, export
from ernie_deploy.fetch import shipped
from ernie_deploy.fetch.checkpoints import inspect_checkpoint
from ernie_deploy.fetch.data import split_file
from ernie_deploy.fetch.datasets import prepare
from ernie_deploy.pipeline.convert import convert_model
from ernie_deploy.pipeline.options import ConvertOptions
from ernie_deploy.train.bootstrap import load_meta, train

# (model record, static model, model.onnx, test split file, proposer) -> {"paddle": report, "onnx": report}: the
# offline scores its clients give served (ernie_deploy.evaluate.retrieval_offline.evaluate, which the command passes
# in); `proposer`: for a kind that re-orders another model's candidates (Kind.proposed_by), that model's (record,
# static model, model.onnx), else None.
Scorer = Callable[[Any, StaticModel, Path, Path, Any], dict]


def ship(task: TaskSpec, score: Scorer, *, root: Path | None = None, log: Callable[[str], None] = print) -> Path:
    """Write demo/<task.name>/ from the task's checkpoint trained here, its test split scored by `score`; returns the
    folder."""
    data = prepare(task.dataset)
    checkpoint = train(task, data, retrain=True)
    meta = load_meta(checkpoint)
    with staging_dir(artifacts_dir() / "ship", task.name) as work:
        static, onnx = _converted(checkpoint, task, work / task.name, log)
        proposer = None
        if task.kind_facts.proposed_by:  # scored over the candidates of the model it starts from (its recipe's base)
            base = get_task(meta["recipe"]["init_from"])
            base_static, base_onnx = _converted(train(base, prepare(base.dataset)), base, work / base.name, log)
            proposer = (base_static.spec, base_static, base_onnx)
        scores = score(static.spec, static, onnx, split_file(data, "test", task.split_format), proposer)
    metric = task.metric
    record = {
        "cache_key": checkpoint.name,
        "command": f"python -m ernie_deploy.train.bootstrap {task.name} --train",
        "seed": meta["seed"],
        "recipe_version": meta["recipe_version"],
        "data": {"dataset": task.dataset, "splits_sha256": meta["data_sha256"], "vocab_sources": meta["vocab_sources"]},
        "scores": {
            "metric": metric,
            "dev": meta["dev"],
            "test": scores["paddle"][metric],
            "test_onnx": scores["onnx"][metric],
            "test_n": scores["paddle"]["n"],
            "test_report": scores["paddle"],  # every figure of it (recall@10 beside MRR@10, NDCG@10, ...)
        },
        "training": {
            "steps": meta["steps"],
            "seconds": meta["timings_s"]["total"],
            "threads": meta["threads"],
            "cores": os.cpu_count(),
            "created": meta["created"],
            "versions": meta["versions"],
        },
    }
    folder = shipped.write_shipped(task.name, checkpoint, record, root)
    log(f"{task.name}: shipped at {folder}: {metric} dev {meta['dev']:.4f}, test {scores['paddle'][metric]:.4f}")
    return folder


def _converted(checkpoint: Path, task: TaskSpec, work: Path, log) -> tuple[StaticModel, Path]:
    """A checkpoint exported and converted as the pipeline does: its static model and model.onnx."""
    static = export(inspect_checkpoint(checkpoint), task, work / "static")
    return static, convert_model(static, ConvertOptions(), out=work / "onnx" / "model.onnx", log=log)


# The page whose table of the shipped models `table()` renders, between these two lines.
TABLE_PAGE = Path(__file__).resolve().parents[2] / "docs" / "CONVERT.md"
TABLE_BEGIN = "<!-- demo models: rendered by `python -m ernie_deploy.cli.ship --table` -->"
TABLE_END = "<!-- end of the demo models -->"


def table(root: Path | None = None) -> str:
    """The shipped models as a Markdown table, from their manifests and training records: each figure's one home."""
    rows = [
        "| task | shape | starts from | trained on | steps | training | dev | test (Paddle = ONNX) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for folder in sorted(Path(root or shipped.SHIPPED_ROOT).iterdir()):
        record = shipped.manifest(folder.name, root)
        if record is None:
            continue
        meta = load_meta(folder)
        recipe, scores, trained = meta["recipe"], record["scores"], record["training"]
        shape = f"{recipe['num_hidden_layers']} x {recipe['hidden_size']}, FFN {recipe['intermediate_size']}"
        epochs = len(meta["history"])
        rows.append(
            f"| `{folder.name}` | {shape} | {recipe.get('init_from') or 'random init'} "
            f"| {meta['rows']['train']:,} rows, {epochs} epoch{'s' if epochs > 1 else ''} | {trained['steps']:,} "
            f"| {trained['seconds'] / 60:.1f} min, {trained['threads']} thread{'s' if trained['threads'] > 1 else ''} "
            f"| {scores['metric']} {scores['dev']:.4f} | {scores['test']:.4f} (n={scores['test_n']:,}) |"
        )
    return "\n".join(rows) + "\n"


def write_table(page: Path = TABLE_PAGE, root: Path | None = None) -> None:
    """Put `table()` between the page's two marker lines."""
    text = page.read_text(encoding="utf-8")
    head, _, rest = text.partition(TABLE_BEGIN + "\n")
    _, _, tail = rest.partition(TABLE_END)
    page.write_text(f"{head}{TABLE_BEGIN}\n{table(root)}{TABLE_END}{tail}", encoding="utf-8")
