"""Which train rows a bootstrap trains on, and the token lengths it was trained on, recorded with it (bootstrap.json)
so that a model that reads long texts in windows reads them in windows of about those lengths
(core.spec.ModelSpec.window_default).

`trained_tokens` is the length three in four training texts reach ([CLS] and [SEP] included): the positions the model
saw in most of its training. Measured on the demo NER model (trained on MSRA sentences: 28 tokens at this point, 39
at the median, 102 at most) over the msra_docs documents, ONNX in process, entity F1 against 0.6641 on sentences:
windows of 28 tokens 0.6610, of 32 0.6585, of 39 (the median) 0.6543, of 128 (max_seq_len) 0.47.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ernie_deploy.core.files import write_json
from ernie_deploy.core.tasks import TaskSpec
from ernie_deploy.fetch import data as data_mod
from ernie_deploy.train.kind_recipe import text_rows
from ernie_deploy.train.recipes import KIND_RECIPES
from ernie_deploy.train.vocab import training_tokenizer

TRAINED_PERCENTILE = 25  # the length 100 - 25 = 75% of the training texts reach


def train_subset(texts: list, labels: list, recipe: dict[str, Any]) -> tuple[list, list]:
    """The train rows the recipe trains on: all, or a seeded subset of `max_train_rows`."""
    import numpy as np

    if not recipe["max_train_rows"] or recipe["max_train_rows"] >= len(texts):
        return texts, labels
    keep = sorted(np.random.RandomState(recipe["seed"]).permutation(len(texts))[: recipe["max_train_rows"]])
    return [texts[i] for i in keep], [labels[i] for i in keep]


def length_record(lengths: list[int]) -> dict[str, Any]:
    """What bootstrap.json records of the training texts' token lengths."""
    import numpy as np

    if not lengths:
        return {}
    values = np.asarray(lengths)

    def at(q: float) -> int:
        return int(np.percentile(values, q, method="lower"))

    return {
        "trained_tokens": at(TRAINED_PERCENTILE),
        "trained_token_lengths": {"p25": at(25), "p50": at(50), "p90": at(90), "max": int(values.max())},
    }


def record_lengths(ckpt: Path, task: TaskSpec, data_dir: Path, recipe: dict[str, Any], meta_file: str) -> None:
    """Add the record to a checkpoint cached before lengths were recorded, computed as training computes them: the
    same train rows encoded by the same tokenizer over the checkpoint's own vocabulary."""

    path = Path(ckpt) / meta_file
    meta = json.loads(path.read_text(encoding="utf-8"))
    if "trained_tokens" in meta:
        return
    texts, labels = data_mod.read_split(Path(data_dir), "train", recipe["split_format"])
    kind = KIND_RECIPES[task.kind]
    label2id = {name: i for i, name in enumerate(kind.label_list(labels))}  # as training reads them: every row
    texts, labels = train_subset(texts, labels, recipe)
    tokenizer = training_tokenizer(Path(ckpt) / "vocab.txt", recipe["max_seq_len"])
    rows = [row for t, y in zip(texts, labels) for row in text_rows(kind, tokenizer, t, y, label2id)]
    lengths = [len(ids) for ids, _ in (kind.thin(rows, recipe) if kind.thin is not None else rows)]
    write_json({**meta, **length_record(lengths)}, path)
