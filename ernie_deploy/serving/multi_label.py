"""Multi-label classification: a sigmoid score per label, and a set of labels per text, each label kept when its
score reaches that label's threshold.

The thresholds are stored with the model as `thresholds.json` ({label: threshold}, chosen per label on the dev
split by `ernie-deploy convert`). The postprocess step, the offline scores and `ernie-deploy build` read them
through `read_thresholds`, so a file that does not fit the model is refused with one message everywhere.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from ernie_deploy.core.errors import BadDataError, BadRepositoryError

THRESHOLDS_FILE = "thresholds.json"
DEFAULT_THRESHOLD = 0.5


def sigmoid(logits: np.ndarray) -> np.ndarray:
    """Each label's probability, on its own (not a softmax: labels do not compete). In float64, so the comparison
    with a threshold is the same wherever it runs; 1 / (1 + exp(-x)) overflows to 0 for x < -709, not to NaN."""
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-np.asarray(logits, dtype=np.float64)))


def check_thresholds(thresholds, labels: list[str], source: str) -> dict[str, float]:
    """{label: threshold} for exactly the model's labels, each a number in [0, 1]; else a clear error."""
    fix = (
        f"give {source} one threshold in [0, 1] per label of labels.json, e.g. "
        + json.dumps(dict.fromkeys(labels, DEFAULT_THRESHOLD))
        + "; or build without --thresholds, which uses the ones `ernie-deploy convert` chose"
    )
    if not isinstance(thresholds, dict):
        raise BadDataError(f"{source} holds {type(thresholds).__name__}, not a {{label: threshold}} object", fix)
    missing = [label for label in labels if label not in thresholds]
    extra = sorted(set(thresholds) - set(labels))
    if missing or extra:
        parts = [f"lacks {', '.join(missing)}" if missing else "", f"names unknown {', '.join(extra)}" if extra else ""]
        raise BadDataError(f"{source} does not match the model's labels: it {' and '.join(p for p in parts if p)}", fix)
    bad = [
        f"{label}: {thresholds[label]!r}"
        for label in labels
        if isinstance(thresholds[label], bool)
        or not isinstance(thresholds[label], int | float)
        or not (math.isfinite(thresholds[label]) and 0.0 <= thresholds[label] <= 1.0)
    ]
    if bad:
        raise BadDataError(f"{source}: thresholds must be numbers in [0, 1], got {'; '.join(bad)}", fix)
    return {label: float(thresholds[label]) for label in labels}


def read_thresholds(path: str | Path, labels: list[str]) -> dict[str, float]:
    """The thresholds file at `path`, checked against the model's labels."""
    path = Path(path)
    if not path.is_file():
        raise BadDataError(
            f"no thresholds file at {path}",
            "run `ernie-deploy convert` (it chooses them on the dev split), or pass `ernie-deploy build --thresholds`",
        )
    try:
        thresholds = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadDataError(f"{path} is not JSON: {exc}", "write it as a {label: threshold} JSON object") from None
    return check_thresholds(thresholds, labels, str(path))


def labels_over(scores: np.ndarray, labels: list[str], thresholds: dict[str, float]) -> list[list[dict]]:
    """scores [texts, labels] -> per text, [{"label", "score"}] for each label whose score reaches its threshold,
    best first (ties in label order)."""
    cut = np.array([thresholds[label] for label in labels], dtype=np.float64)
    out = []
    for row in np.asarray(scores, dtype=np.float64):
        kept = [i for i in np.argsort(-row, kind="stable") if row[i] >= cut[i]]
        out.append([{"label": labels[i], "score": float(row[i])} for i in kept])
    return out


def predictions_from_json(item: bytes | str) -> list[dict]:
    """One element of the `labels` output -> [{"label", "score"}], checked for its shape."""
    value = json.loads(item.decode("utf-8") if isinstance(item, bytes) else item)
    if not isinstance(value, list) or not all(
        isinstance(v, dict) and isinstance(v.get("label"), str) and isinstance(v.get("score"), int | float)
        for v in value
    ):
        raise BadRepositoryError(
            f"expected a JSON list of {{'label', 'score'}} objects, got {str(value)[:200]}",
            "call a multi_label model",
        )
    return value
