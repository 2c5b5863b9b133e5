"""Per-label decision thresholds of a multi-label model, chosen on the dev split.

Each label's threshold is the one that maximises that label's F1 on the dev split, scored with the converted
(FP32) ONNX model and the serving tokenizer, i.e. the scores the server will compute. Among equally good
thresholds the one nearest 0.5 wins (the untuned default); a label with no dev positives keeps 0.5 (no
threshold does better than another on it). Candidates are 0.5 and the midpoints between neighbouring distinct
dev scores (and one below the lowest): a midpoint stays on the same side of every dev score when Paddle and ONNX
differ in the last float digits.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ernie_deploy.core.errors import BadCheckpointError, BadDataError
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.fetch.data import read_split_file
from ernie_deploy.serving.encoding import encode_batch
from ernie_deploy.serving.multi_label import DEFAULT_THRESHOLD, sigmoid
from ernie_deploy.serving.runtime import OnnxModel
from ernie_deploy.serving.tokenizer import build_tokenizer


def f1_at(scores: np.ndarray, gold: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """F1 of one label at each threshold (a text is predicted positive when its score >= the threshold)."""
    predicted = scores[None, :] >= thresholds[:, None]
    tp = (predicted & gold[None, :]).sum(axis=1)
    fp = (predicted & ~gold[None, :]).sum(axis=1)
    fn = gold.sum() - tp
    denominator = 2 * tp + fp + fn
    return np.where(denominator > 0, 2 * tp / np.maximum(denominator, 1), 0.0)


def choose_threshold(scores: np.ndarray, gold: np.ndarray) -> float:
    """The threshold with the best F1 for one label (scores and 0/1 gold over the dev texts)."""
    scores, gold = np.asarray(scores, dtype=np.float64), np.asarray(gold, dtype=bool)
    if not gold.any():
        return DEFAULT_THRESHOLD
    distinct = np.unique(scores)
    candidates = np.concatenate([[DEFAULT_THRESHOLD, distinct[0] / 2], (distinct[:-1] + distinct[1:]) / 2])
    f1 = f1_at(scores, gold, candidates)
    best = np.flatnonzero(np.isclose(f1, f1.max(), rtol=0, atol=1e-12))
    return float(candidates[best[np.argmin(np.abs(candidates[best] - DEFAULT_THRESHOLD))]])


def choose_thresholds(logits: np.ndarray, gold: list[list[str]], labels: list[str]) -> dict[str, float]:
    """{label: threshold} from the dev logits [texts, labels] and each text's gold label names."""
    logits = np.asarray(logits)
    if logits.ndim != 2 or logits.shape != (len(gold), len(labels)):
        raise BadCheckpointError(
            f"dev logits have shape {list(logits.shape)}, expected [{len(gold)}, {len(labels)}]",
            "convert a multi-label model (one logit per label)",
        )
    unknown = sorted({name for names in gold for name in names} - set(labels))
    if unknown:
        raise BadDataError(
            f"the dev split has labels {unknown} the model does not know ({', '.join(labels)})",
            "choose thresholds on the split of the data the model was trained on",
        )
    scores = sigmoid(logits)
    hot = np.array([[label in names for label in labels] for names in gold], dtype=bool)
    return {label: choose_threshold(scores[:, i], hot[:, i]) for i, label in enumerate(labels)}


def dev_thresholds(
    model: ModelSpec, onnx_path: str | Path, vocab_file: str | Path, dev_file: str | Path, *, batch_size: int = 64
) -> dict[str, float]:
    """Thresholds of `model`'s labels chosen on a dev split file with the ONNX model at `onnx_path` and the serving
    tokenizer, the texts cut and lowercased as the record says."""

    texts, gold = read_split_file(dev_file)
    if not texts or not all(isinstance(g, list) for g in gold):
        raise BadDataError(
            f"{dev_file} is not a multi-label split (a `labels<TAB>text` TSV with rows)",
            "run `ernie-deploy fetch-data`, or pass --dev a label-set TSV",
        )
    labels = list(model.labels)
    tokenizer, onnx = build_tokenizer(vocab_file, lowercase=model.do_lower_case), OnnxModel(onnx_path)
    logits = np.zeros((len(texts), len(labels)), dtype=np.float32)
    for start in range(0, len(texts), batch_size):
        enc = encode_batch(tokenizer, texts[start : start + batch_size], model.max_seq_len)
        logits[start : start + batch_size] = onnx(enc.input_ids, enc.token_type_ids)
    return choose_thresholds(logits, gold, labels)
