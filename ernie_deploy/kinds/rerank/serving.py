"""The postprocess step of a score per (query, text) pair: the model's logit -> the score the record names."""

from __future__ import annotations

import numpy as np

from ernie_deploy.core.errors import BadRequest
from ernie_deploy.core.profile import CONFIDENCE, confidence_bucket
from ernie_deploy.core.tasks import LOGITS, RAW_LOGITS
from ernie_deploy.serving.kind_serving import KindServing
from ernie_deploy.serving.parameters import SCORING
from ernie_deploy.serving.step import Step, split_rows
from ernie_deploy.serving.watch import KindWatch

SCORE_OUTPUT = "score"


def sigmoid(x: np.ndarray) -> np.ndarray:
    # Split by sign so that neither branch overflows exp for a large logit.
    out = np.empty_like(x)
    positive = x >= 0
    out[positive] = 1.0 / (1.0 + np.exp(-x[positive]))
    e = np.exp(x[~positive])
    out[~positive] = e / (1.0 + e)
    return out


class RerankPostprocess(Step):
    """logits [B, 1] (the log-odds that the text answers the query) -> score FP32 [B, 1]: its sigmoid, or the logit
    itself for a model exported with `--score raw`; and for a request that names it, the logit (`logits`)."""

    def __init__(self, config: dict, version_dir):
        self.raw = SCORING.read(config) == "raw"

    def check(self, inputs):
        logits = inputs[LOGITS]
        if logits.ndim != 2 or logits.shape[-1] != 1:
            raise BadRequest(
                f"the model answered logits of shape {list(logits.shape)}, not one per pair",
                "convert the checkpoint again with --task rerank, whose graph answers one logit per pair",
            )
        return logits

    def run(self, items, requested=None):
        logits = np.concatenate(items).astype(np.float32)
        scores = logits if self.raw else sigmoid(logits)
        answers = [{SCORE_OUTPUT: scores[rows]} for rows in split_rows([len(i) for i in items])]
        if requested is None or RAW_LOGITS.name in requested:  # what the score comes from, passed through
            for answer, rows in zip(answers, split_rows([len(i) for i in items])):
                answer[RAW_LOGITS.name] = logits[rows]
        return answers


def _answers(outputs: dict, labels: list[str]) -> list[float]:
    return [float(score) for score in np.asarray(outputs[SCORE_OUTPUT]).reshape(-1)]


def _profile(score: float) -> list[tuple[str, str]]:
    # A probability falls in the confidence buckets; a raw logit has no bounded scale to bucket.
    return [(CONFIDENCE, confidence_bucket(score))] if 0.0 <= score <= 1.0 else []


# What a score per pair is to the watch (serving.watch): its bucket; two answers agree to 2 places.
WATCH = KindWatch(
    series=(CONFIDENCE,), needs=(SCORE_OUTPUT,), read=_answers, profile=_profile, key=lambda score: round(score, 2)
)

# What the serving layer reads of this kind (listed in serving.postprocess_steps). A score has no PaddleNLP wire.
SERVING = KindServing(postprocess=RerankPostprocess, watch=WATCH)
