"""The postprocess step of a label per text: logits -> the label, its id and its softmax confidence."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ernie_deploy.core.errors import BadRequest
from ernie_deploy.core.profile import CONFIDENCE, LABEL, confidence_bucket
from ernie_deploy.core.tasks import LOGITS, PROBABILITIES, RAW_LOGITS
from ernie_deploy.serving.kind_serving import KindServing
from ernie_deploy.serving.parameters import LABELS_FILE
from ernie_deploy.serving.step import Step, read_labels, split_rows
from ernie_deploy.serving.watch import KindWatch


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=-1, keepdims=True)


class SeqClsPostprocess(Step):
    """logits [B, C] -> label_id INT64, label BYTES, confidence FP32, each [B, 1]; and for a request that names it,
    probabilities FP32 [B, C] (softmax, labels.json order) and logits FP32 [B, C] (its input, passed through)."""

    def __init__(self, config: dict, version_dir: Path):
        self.labels = read_labels(Path(version_dir) / LABELS_FILE.read(config))
        self._names = np.array([label.encode("utf-8") for label in self.labels], dtype=np.object_)

    def check(self, inputs):
        logits = inputs[LOGITS]
        if logits.ndim != 2 or logits.shape[-1] != len(self.labels):
            raise BadRequest(
                f"logits have {logits.shape[-1]} classes but labels.json names {len(self.labels)}",
                "rebuild the repository so labels.json comes from the same model",
            )
        return logits

    def run(self, items, requested=None):
        # A lone request's logits as they are (no concatenation, no float32 copy of float32): each numpy call here is
        # a few microseconds of a lone request's time (benchmarks/lone_request.py).
        logits = (items[0] if len(items) == 1 else np.concatenate(items)).astype(np.float32, copy=False)
        probs = softmax(logits)
        ids = probs.argmax(axis=-1)
        label_id = ids.astype(np.int64).reshape(-1, 1)
        label = self._names[ids].reshape(-1, 1)
        confidence = probs[np.arange(len(ids)), ids].reshape(-1, 1)  # the max, read where argmax found it
        every = split_rows([len(i) for i in items])
        answers = [{"label_id": label_id[rows], "label": label[rows], "confidence": confidence[rows]} for rows in every]
        if requested is None or PROBABILITIES.name in requested:
            # The softmax the label comes from, so that probabilities' argmax and max are label_id and confidence.
            for answer, rows in zip(answers, every):
                answer[PROBABILITIES.name] = probs[rows]
        if requested is None or RAW_LOGITS.name in requested:  # what the label comes from, passed through
            for answer, rows in zip(answers, every):
                answer[RAW_LOGITS.name] = logits[rows]
        return answers


def _answers(outputs: dict, labels: list[str]) -> list[tuple[str, float]]:
    ids = np.asarray(outputs["label_id"]).reshape(-1)
    confidence = np.asarray(outputs.get("confidence", np.full(len(ids), np.nan))).reshape(-1)
    return [(labels[i] if 0 <= i < len(labels) else str(i), float(c)) for i, c in zip(ids.tolist(), confidence)]


def _profile(answer: tuple[str, float]) -> list[tuple[str, str]]:
    label, confidence = answer
    return (
        [(LABEL, label)] if confidence != confidence else [(LABEL, label), (CONFIDENCE, confidence_bucket(confidence))]
    )


# What a label per text is to the watch (serving.watch): its label and top confidence; two answers agree on the label.
WATCH = KindWatch(
    series=(LABEL, CONFIDENCE),
    needs=("label_id", "confidence"),
    read=_answers,
    profile=_profile,
    key=lambda answer: answer[0],
    flip=lambda answer: answer[0],
)


# What the serving layer reads of this kind (listed in serving.postprocess_steps): its postprocess step, served
# under the kind's `postprocess` key (serving.steps.STEPS), and its part of the watch. Under PaddleNLP's wire a label
# per text is renamed only (Kind.paddlenlp_outputs): nothing is written otherwise.
SERVING = KindServing(postprocess=SeqClsPostprocess, watch=WATCH)
