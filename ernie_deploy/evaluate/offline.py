"""Offline scores of the exported models: Paddle-native (Paddle Inference + paddlenlp's ErnieTokenizer) and
ONNX (onnxruntime + the serving tokenizer). The served score must equal these.

Both paths end in the same per-text predictions the server returns (a label name per text, or a list of
entities with character offsets), scored by the same function as the gRPC clients' results.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
from tqdm import tqdm

from ernie_deploy.core.tasks import TaskSpec
from ernie_deploy.export.static import StaticModel
from ernie_deploy.serving.tokenizer import Encoded


def _chars(item) -> int:
    """Characters in a text, or in both texts of a (text, text_pair) tuple."""
    return sum(map(len, item)) if isinstance(item, tuple) else len(item)


def _batches(texts: list, batch_size: int):
    """Length-sorted batches (less padding), yielded with their original positions."""
    order = sorted(range(len(texts)), key=lambda i: _chars(texts[i]))
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        yield idx, [texts[i] for i in idx]


def _labels(labels: list[str], logits: np.ndarray, enc: Encoded, texts: list[str]) -> list:
    return [labels[i] for i in logits.argmax(-1)]


def _entities(labels: list[str], logits: np.ndarray, enc: Encoded, texts: list[str]) -> list:
    from ernie_deploy.serving.entities import constrained_label_ids, decode_entities

    ids = constrained_label_ids(logits, enc.lengths, labels)
    return [decode_entities(text, ids[i], enc.offsets[i], int(enc.lengths[i]), labels) for i, text in enumerate(texts)]


def _label_sets(
    labels: list[str], logits: np.ndarray, enc: Encoded, texts: list[str], thresholds: dict[str, float] | None = None
) -> list:
    from ernie_deploy.serving.multi_label import DEFAULT_THRESHOLD, labels_over, sigmoid

    return labels_over(sigmoid(logits), labels, thresholds or dict.fromkeys(labels, DEFAULT_THRESHOLD))


# Logits of one batch -> what the ensemble returns per text (the postprocess steps' logic), per task kind.
PREDICTORS = {"sequence": _labels, "token": _entities, "multi_label": _label_sets}


def predictions(
    task: TaskSpec, labels: list[str], logits: np.ndarray, enc: Encoded, texts: list[str], **model_files
) -> list:
    """`model_files`: what a model stores beside its labels, for the kinds that read it (thresholds=...)."""
    return PREDICTORS[task.kind](labels, logits, enc, texts, **model_files)


def predict(
    task: TaskSpec,
    labels: list[str],
    texts: list[str],
    encode: Callable[[list[str]], Encoded],
    run: Callable[[np.ndarray, np.ndarray], np.ndarray],
    *,
    batch_size: int = 64,
    desc: str = "",
    **model_files,
) -> list:
    out: list = [None] * len(texts)
    for idx, batch in tqdm(list(_batches(texts, batch_size)), desc=desc, unit="batch", leave=False):
        enc = encode(batch)
        logits = run(enc.input_ids, enc.token_type_ids)
        for i, value in zip(idx, predictions(task, labels, logits, enc, batch, **model_files)):
            out[i] = value
    return out


def paddle_encoder(
    vocab_file: str | Path, max_seq_len: int, do_lower_case: bool = True
) -> Callable[[list[str]], Encoded]:
    """paddlenlp's ErnieTokenizer, its output laid out like the serving tokenizer's (padded to the longest).

    max_seq_len and do_lower_case: the exported model's (StaticModel.max_seq_len, .do_lower_case)."""
    from paddlenlp.transformers import ErnieTokenizer

    tokenizer = ErnieTokenizer(str(vocab_file), do_lower_case=do_lower_case)

    def encode(batch: list) -> Encoded:
        # A batch of (text, text_pair) tuples goes in as paddlenlp takes pairs: the texts, then their pairs.
        columns = list(zip(*batch)) if batch and isinstance(batch[0], tuple) else [batch]
        enc = tokenizer(
            *map(list, columns),
            max_length=max_seq_len,
            truncation=True,
            return_offsets_mapping=True,
            return_attention_mask=False,
        )
        lengths = np.array([len(ids) for ids in enc["input_ids"]], np.int64)
        width = int(lengths.max())
        ids = np.zeros((len(batch), width), np.int64)
        types = np.zeros_like(ids)
        offsets = np.zeros((len(batch), width, 2), np.int64)
        for row, n in enumerate(lengths):
            ids[row, :n] = enc["input_ids"][row]
            types[row, :n] = enc["token_type_ids"][row]
            offsets[row, :n] = enc["offset_mapping"][row]
        # Informational only (no score reads it): a row that fills max_seq_len was most likely cut.
        return Encoded(ids, types, offsets, lengths, lengths >= max_seq_len)

    return encode


def paddle_predictions(task: TaskSpec, static: StaticModel, texts: list[str], **model_files) -> list:
    """The Paddle-native reference."""
    from ernie_deploy.export.static import PaddlePredictor

    return predict(
        task,
        static.labels,
        texts,
        paddle_encoder(static.vocab_file, task.max_seq_len, static.do_lower_case),
        PaddlePredictor(static),
        desc="paddle",
        **model_files,
    )


def onnx_predictions(
    task: TaskSpec, onnx_path: str | Path, vocab_file: str | Path, labels: list[str], texts: list[str], **model_files
) -> list:
    """What the server computes, in-process: the serving tokenizer and onnxruntime."""
    from ernie_deploy.serving.runtime import OnnxModel
    from ernie_deploy.serving.tokenizer import build_tokenizer, encode_items

    tokenizer = build_tokenizer(vocab_file)
    return predict(
        task,
        labels,
        texts,
        lambda batch: encode_items(tokenizer, batch, task.max_seq_len),
        OnnxModel(onnx_path),
        desc="onnx",
        **model_files,
    )


def evaluate(task: TaskSpec, static: StaticModel, onnx_path: str | Path, split_file: str | Path) -> dict:
    """{"paddle": report, "onnx": report} on a split file (the task's format: TSV or JSON Lines)."""
    from ernie_deploy.evaluate.metrics import score
    from ernie_deploy.fetch.data import read_split_file

    texts, gold = read_split_file(split_file)
    files = model_files(task, Path(onnx_path).parent, static.labels)
    return {
        "paddle": score(task, texts, gold, paddle_predictions(task, static, texts, **files), static.labels),
        "onnx": score(
            task,
            texts,
            gold,
            onnx_predictions(task, onnx_path, static.vocab_file, static.labels, texts, **files),
            static.labels,
        ),
    }


def model_files(task: TaskSpec, folder: str | Path, labels: list[str]) -> dict:
    """What the postprocess reads besides labels.json, from `folder` (the converted model's, where `convert` wrote
    them, or a postprocess step's version folder): a multi-label model's thresholds, so that offline predictions
    decide as the server does."""
    from ernie_deploy.serving.multi_label import THRESHOLDS_FILE, read_thresholds

    return {"thresholds": read_thresholds(Path(folder) / THRESHOLDS_FILE, labels)} if task.thresholds else {}
