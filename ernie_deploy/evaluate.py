"""Offline scores of the exported models: Paddle-native (Paddle Inference + ErnieTokenizer) and ONNX
(onnxruntime + the serving tokenizer). The served score must equal these."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from tqdm import tqdm

from .export import StaticModel
from .tasks import TaskSpec


def _batches(texts: list[str], batch_size: int):
    """Length-sorted batches (less padding), yielded with their original positions."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        yield idx, [texts[i] for i in idx]


def _collect(texts, batch_size, run, desc) -> np.ndarray:
    out = None
    for idx, batch in tqdm(list(_batches(texts, batch_size)), desc=desc, unit="batch", leave=False):
        logits = run(batch)
        if out is None:
            out = np.zeros((len(texts), *logits.shape[1:]), np.float32)
        out[idx] = logits
    return out


def paddle_logits(static: StaticModel, texts: list[str], max_seq_len: int, batch_size: int = 64) -> np.ndarray:
    """The Paddle-native reference: paddlenlp's ErnieTokenizer and Paddle Inference."""
    from paddlenlp.transformers import ErnieTokenizer

    from .export import PaddlePredictor

    tokenizer = ErnieTokenizer(str(static.vocab_file))
    predictor = PaddlePredictor(static)

    def run(batch):
        enc = tokenizer(batch, max_length=max_seq_len, truncation=True, padding=True, return_attention_mask=False)
        ids = np.array(enc["input_ids"], np.int64)
        return predictor(ids, np.array(enc["token_type_ids"], np.int64))

    return _collect(texts, batch_size, run, "paddle")


def onnx_logits(onnx_path: str | Path, vocab_file: str | Path, texts: list[str], max_seq_len: int,
                batch_size: int = 64) -> np.ndarray:
    """What the server computes, in-process: the serving tokenizer and onnxruntime."""
    from .runtime import OnnxModel
    from .tokenizer import build_tokenizer, encode_batch

    tokenizer, model = build_tokenizer(vocab_file), OnnxModel(onnx_path)

    def run(batch):
        enc = encode_batch(tokenizer, batch, max_seq_len)
        return model(enc.input_ids, enc.token_type_ids)

    return _collect(texts, batch_size, run, "onnx")


def seq_cls_scores(task: TaskSpec, logits: np.ndarray, labels: list[str], gold: list[str]) -> dict:
    from .metrics import classification_report

    predicted = [labels[i] for i in logits.argmax(-1)]
    return classification_report(gold, predicted, labels)


def evaluate(task: TaskSpec, static: StaticModel, onnx_path: str | Path, split_file: str | Path) -> dict:
    """{"paddle": report, "onnx": report} on a TSV split."""
    from .data import read_tsv

    texts, gold = read_tsv(split_file)
    results = {}
    for name, logits in (("paddle", paddle_logits(static, texts, task.max_seq_len)),
                         ("onnx", onnx_logits(onnx_path, static.vocab_file, texts, task.max_seq_len))):
        results[name] = seq_cls_scores(task, logits, static.labels, gold)
    return results
