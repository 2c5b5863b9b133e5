"""The postprocess step of a set of labels per text: logits -> each label's sigmoid score, and the labels over their
thresholds."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ernie_deploy.core.errors import BadRequest
from ernie_deploy.core.profile import LABEL, LABELS_PER_TEXT, count_bucket
from ernie_deploy.core.tasks import LOGITS, PROBABILITIES, RAW_LOGITS
from ernie_deploy.serving.kind_serving import KindServing
from ernie_deploy.serving.multi_label import labels_over, read_thresholds, sigmoid
from ernie_deploy.serving.parameters import LABELS_FILE, THRESHOLDS
from ernie_deploy.serving.step import Step, read_labels, split_rows
from ernie_deploy.serving.watch import KindWatch, json_item


class MultiLabelPostprocess(Step):
    """logits [B, C] -> labels [B, 1] BYTES: a JSON list of {"label", "score"} for each label whose sigmoid score
    reaches its threshold (thresholds.json), best first; scores [B, C] FP32: every label's sigmoid score; probabilities,
    for a request that names it: the same scores under the name every classifier answers them by."""

    def __init__(self, config: dict, version_dir: Path):

        version_dir = Path(version_dir)
        self.labels = read_labels(version_dir / LABELS_FILE.read(config))
        self.thresholds = read_thresholds(version_dir / THRESHOLDS.read(config), self.labels)

    def check(self, inputs):
        logits = inputs[LOGITS]
        if logits.ndim != 2 or logits.shape[-1] != len(self.labels):
            raise BadRequest(
                f"logits have shape {list(logits.shape)}; expected [batch, {len(self.labels)}] for the labels in "
                "labels.json",
                "rebuild the repository so labels.json comes from the same model",
            )
        return logits

    def run(self, items, requested=None):

        logits = np.concatenate(items)
        scores = sigmoid(logits)
        kept = labels_over(scores, self.labels, self.thresholds)
        labels = np.array([json.dumps(k, ensure_ascii=False) for k in kept], dtype=np.object_).reshape(-1, 1)
        scores = scores.astype(np.float32)
        answers = [{"labels": labels[rows], "scores": scores[rows]} for rows in split_rows([len(i) for i in items])]
        if requested is None or PROBABILITIES.name in requested:
            for answer in answers:
                answer[PROBABILITIES.name] = answer["scores"]
        if requested is None or RAW_LOGITS.name in requested:  # what the scores come from, passed through
            raw = logits.astype(np.float32)
            for answer, rows in zip(answers, split_rows([len(i) for i in items])):
                answer[RAW_LOGITS.name] = raw[rows]
        return answers


def _answers(outputs: dict, labels: list[str]) -> list[frozenset[str]]:
    return [frozenset(item["label"] for item in json_item(raw)) for raw in np.asarray(outputs["labels"]).reshape(-1)]


def _profile(answer: frozenset[str]) -> list[tuple[str, str]]:
    return [*((LABEL, label) for label in sorted(answer)), (LABELS_PER_TEXT, count_bucket(len(answer)))]


# What a set of labels is to the watch (serving.watch): two answers agree on the whole set. No flip table: its rows
# would be label sets, up to 2^labels of them, and a series per pair of sets has no bound.
WATCH = KindWatch(
    series=(LABEL, LABELS_PER_TEXT), needs=("labels",), read=_answers, profile=_profile, key=lambda answer: answer
)


# What the serving layer reads of this kind (listed in serving.postprocess_steps): its postprocess step, served
# under the kind's `postprocess` key (serving.steps.STEPS), and its part of the watch. A set of labels per text has no
# PaddleNLP wire (core.io refuses it): nothing to write otherwise.
SERVING = KindServing(postprocess=MultiLabelPostprocess, watch=WATCH)
