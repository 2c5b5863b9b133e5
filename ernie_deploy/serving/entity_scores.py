"""An entity's score: how sure the model was of the tags its entity was read from.

Standard library and numpy only, like serving.entities: the Triton python backend imports it.

The score of an entity is the mean, over the entity's tokens, of the softmax probability of the tag the decoding chose
for that token (serving.entities.DECODINGS: each token's most likely tag under argmax, the tag on the best valid IOB2
path under constrained). Probabilities are computed in float64 from the logits the tags were decoded from: a text's
own logits, or the merged logits of its windows (serving.windows.merge_windows). The Paddle reference
(evaluate.offline) and the served postprocess compute it with the same function from their own logits, so the two
agree as closely as their logits do.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# How far a served score may be from the offline one (Paddle Inference or onnxruntime in process) and still be the
# same answer: FP32 logits of the two runtimes differ in their last bits, which moves a probability by far less.
SCORE_TOLERANCE = 1e-5
# The smallest score answered. A constrained path may choose a tag whose probability underflows float64 (a logit gap
# over ~745); the score stays in (0, 1], the interval a client may rely on.
_SMALLEST = float(np.finfo(np.float64).tiny)


def chosen_probabilities(logits: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """The softmax probability [..., L] of the tag `ids` [..., L] chose for each token, from logits [..., L, C]:
    exp(chosen logit - logsumexp), in float64 (the log of the sum taken from the largest logit, so no overflow)."""
    logits = np.asarray(logits, dtype=np.float64)
    top = logits.max(axis=-1, keepdims=True)
    log_total = np.log(np.exp(logits - top).sum(axis=-1)) + top[..., 0]
    chosen = np.take_along_axis(logits, np.asarray(ids, dtype=np.int64)[..., None], axis=-1)[..., 0]
    return np.exp(chosen - log_total)


def entity_score(probabilities: np.ndarray, first: int, stop: int) -> float:
    """The score of the entity on tokens first .. stop-1: the mean of their chosen tags' probabilities, in (0, 1]."""
    return float(np.clip(np.mean(probabilities[first:stop]), _SMALLEST, 1.0))


def score_problem(score) -> str | None:
    """Why `score` (an entity's "score" read from JSON) is not one, or None when it is: a number in (0, 1]."""
    if isinstance(score, bool) or not isinstance(score, int | float):
        return f"score must be a number, got {score!r}"
    if not 0 < score <= 1:
        return f"score {score!r} is not in (0, 1]"
    return None


def without_scores(answers):
    """Entities as they are but for their scores: an entity dict, a list of them, or nested lists and dicts of them
    (a dict per text holds each decoding's entities), so that two answers' spans compare with ==."""
    if isinstance(answers, dict) and "type" in answers and "start" in answers:
        return {k: v for k, v in answers.items() if k != "score"}
    if isinstance(answers, dict):
        return {k: without_scores(v) for k, v in answers.items()}
    if isinstance(answers, list | tuple):
        return [without_scores(a) for a in answers]
    return answers


def score_differences(a: Sequence, b: Sequence) -> list[float]:
    """|score a - score b| of each entity of two answers of the same entities (nested as `without_scores` reads
    them), in order; an entity without a score on either side differs by infinity."""
    if isinstance(a, dict) and "type" in a and "start" in a:
        return [abs(a["score"] - b["score"]) if "score" in a and "score" in b else float("inf")]
    if isinstance(a, dict):
        return [d for k in a for d in score_differences(a[k], b[k])]
    if isinstance(a, list | tuple):
        return [d for x, y in zip(a, b) for d in score_differences(x, y)]
    return []


def same_entities(a, b, tolerance: float = SCORE_TOLERANCE) -> bool:
    """Whether two answers hold the same entities (type, offsets and text equal) with scores within `tolerance`."""
    return without_scores(a) == without_scores(b) and all(d <= tolerance for d in score_differences(a, b))
