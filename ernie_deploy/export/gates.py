"""What a converted model must pass before it replaces the previous one, and the defaults of each gate."""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from ernie_deploy.core.errors import AccuracyGateError, BadCheckpointError
from ernie_deploy.core.tasks import TaskSpec

DEFAULT_TOLERANCE = 1e-4  # Paddle vs ONNX FP32, max abs logit diff (measured ~2e-7 on ERNIE shapes)
DEFAULT_INT8_MIN_AGREE = 0.97
# Measured FP16-vs-FP32 drift on the bootstrap models' whole test splits: max abs logit diff 0.013 (seq_cls,
# 1,000 texts, all labels equal) and 0.028 (token_cls, 5,000 texts, 99.99% of tokens equal).
DEFAULT_FP16_TOLERANCE = 0.05
DEFAULT_FP16_MIN_AGREE = 0.99


@dataclass(frozen=True)
class Gates:
    """What a converted model must pass before it replaces the previous one."""

    texts: tuple[str, ...] = ()  # empty: no checks at all (--skip-parity)
    tolerance: float = DEFAULT_TOLERANCE  # Paddle vs ONNX FP32, max abs logit diff
    int8_min_agree: float = DEFAULT_INT8_MIN_AGREE
    fp16_tolerance: float = DEFAULT_FP16_TOLERANCE
    fp16_min_agree: float = DEFAULT_FP16_MIN_AGREE


def require_logits_rank(task: TaskSpec, logits, source) -> None:
    """Logits must have the shape the task's kind gives them ([batch, classes] or [batch, tokens, classes]):
    every comparison of two models reads labels per text or per token from it."""
    if logits.ndim != 1 + task.logits_rank:
        expected = "[batch, classes]" if task.logits_rank == 1 else "[batch, tokens, classes]"
        raise BadCheckpointError(
            f"{source} returns logits of shape {list(logits.shape)}; a {task.kind} task "
            f"({task.name}) expects {expected}",
            "export the model for the task it was trained for (`ernie-deploy export --task`)",
        )


# --- comparing scores -----------------------------------------------------------------------------------------
# A gate on a score must not flip on float rounding: 0.828 - 0.827 is 0.0010000000000000009 in floats, so
# "at most a tenth of a point" read as `abs(a - b) <= 0.001` failed on one text of 1,000 (issue 23).

# What a gate on a score that is no count over a fixed total (entity F1 = 2PR/(P+R), micro F1) spares for float
# rounding: the same score reached by two float paths differs in its last digits (~1e-16), while one entity more
# or less on a 5,000-sentence test split moves F1 by ~1e-4. Scores that are a fraction of n texts (accuracy) are
# compared as whole counts of texts instead, with no tolerance.
SCORE_ROUNDING = 1e-9

# Metrics that are a fraction of the texts scored (a report's "n"), compared as counts of texts.
COUNTED_METRICS = frozenset({"accuracy"})


def counted(report: dict) -> int | None:
    """The number of texts a score report's metric is a fraction of (accuracy: its "n"); None for F1 scores."""
    return report["n"] if report["metric"] in COUNTED_METRICS else None


def count_of(score: float, n: int) -> int:
    """How many of n texts a score that is a fraction of them stands for (0.827 of 1,000 texts: 827)."""
    count = round(score * n)
    if abs(score - count / n) > SCORE_ROUNDING:
        raise ValueError(f"{score} is not a fraction of {n} texts")
    return count


def _decimal(threshold: float) -> Fraction:
    """A threshold as the decimal it is written as: 0.001 is exactly 1/1000 (the float is a hair above it)."""
    return Fraction(str(float(threshold)))


def drop_within(reference: float, score: float, points: float, *, n: int | None = None) -> bool:
    """Whether `score` is at most `points` below `reference` (0.001: a tenth of a point); above it always passes.

    n: the number of texts both scores are a fraction of (`counted(report)`): then compared as counts of texts,
    `points` of n rounded down to whole texts (a tenth of a point of 1,000 texts is 1 text; of 999 texts, 0).
    Without n (F1 scores): compared as floats, sparing SCORE_ROUNDING for float rounding."""
    if n is None:
        return reference - score <= points + SCORE_ROUNDING
    return count_of(reference, n) - count_of(score, n) <= math.floor(_decimal(points) * n)


def within(a: float, b: float, points: float, *, n: int | None = None) -> bool:
    """Whether two scores differ by at most `points` either way (`drop_within` both ways): "at most 1 text of 1,000
    changed" is `within(a, b, 0.001, n=1000)`."""
    return drop_within(a, b, points, n=n) and drop_within(b, a, points, n=n)


def at_least(score: float, floor: float, *, n: int | None = None) -> bool:
    """Whether `score` reaches `floor`: with n (a fraction of n texts), as counts of texts (a floor of 0.81 on
    1,000 texts is 810 texts); without n (F1 scores), sparing SCORE_ROUNDING for float rounding."""
    if n is None:
        return score >= floor - SCORE_ROUNDING
    return count_of(score, n) >= math.ceil(_decimal(floor) * n)


def require_at_least(score: float, floor: float, what: str, *, n: int | None = None) -> None:
    """`at_least` as a gate: AccuracyGateError unless `score` reaches `floor`. `what` names the score in the message
    (e.g. "the served seq_cls model's accuracy on its test split"); n as in `at_least`."""
    if not at_least(score, floor, n=n):
        raise AccuracyGateError(
            f"{what} is {score:.4f}, below the gate's {floor:.4f}" + (f" ({n:,} texts)" if n else ""),
            "keep serving the model that passed; look at the data, the training run or the precision it was "
            "converted to before serving this one",
        )
