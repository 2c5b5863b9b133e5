"""Batches for the bootstrap's training loop: seeded shuffling of similar lengths, padding with ERNIE's token types,
and a model scored on an encoded split.

paddle is imported inside functions: importing ernie_deploy stays paddle-free.
"""

from __future__ import annotations

import random
from typing import Any

from ernie_deploy.train.kind_recipe import KindRecipe


def seed_everything(seed: int) -> None:
    import numpy as np
    import paddle

    random.seed(seed)
    np.random.seed(seed)
    paddle.seed(seed)


def shuffled_batches(lengths: list[int], batch_size: int, bucket: int, rng) -> list[list[int]]:
    """Shuffled batches of similar length: length-sort inside shuffled windows, then shuffle batches."""
    order = rng.permutation(len(lengths)).tolist()
    window = max(1, bucket) * batch_size
    batches = []
    for start in range(0, len(order), window):
        chunk = sorted(order[start : start + window], key=lambda i: lengths[i])
        batches += [chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size)]
    rng.shuffle(batches)
    return batches


def collate(rows: list[tuple[list[int], Any]], idx: list[int], kind: KindRecipe, pad_id: int, sep_id: int):
    """Pad to the longest sequence of the batch. token_type_ids: 1 on a pair's second text and its [SEP] (the
    real tokens after the first [SEP]), 0 elsewhere, as ErnieTokenizer gives them; all 0 for single texts."""
    import numpy as np

    width = max(len(rows[i][0]) for i in idx)
    ids = np.full((len(idx), width), pad_id, dtype="int64")
    types = np.zeros_like(ids)
    for r, i in enumerate(idx):
        row = rows[i][0]
        ids[r, : len(row)] = row
        first_sep = row.index(sep_id) if sep_id in row else len(row)
        types[r, first_sep + 1 : len(row)] = 1
    labels = kind.collate_labels([rows[i][1] for i in idx], width)
    return ids, types, labels


def evaluate(
    model, rows, kind: KindRecipe, pad_id: int, sep_id: int, batch_size: int, names: list[str]
) -> tuple[float, list]:
    """The model's metric on encoded `rows` (batches of similar length, no dropout), and its logits per batch."""
    import numpy as np
    import paddle

    model.eval()
    order = sorted(range(len(rows)), key=lambda i: len(rows[i][0]))
    logits_out, labels_out = [], []
    with paddle.no_grad():
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            ids, types, labels = collate(rows, idx, kind, pad_id, sep_id)
            logits = model(paddle.to_tensor(ids), token_type_ids=paddle.to_tensor(types))
            if isinstance(logits, tuple | list):  # a model of several outputs per token (UIE: start, end): [B, L, k]
                logits_out.append(np.stack([out.numpy() for out in logits], axis=-1))
            else:
                logits_out.append(logits.numpy())
            labels_out.append(labels)
    model.train()
    return kind.metric(logits_out, labels_out, names), logits_out
