"""What the evaluation reads of a kind: the object each kinds/<kind>/evaluate.py defines (EVALUATE), listed by
evaluate.metrics."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class KindEvaluate:
    # (labels, logits, encoded batch, texts, the record's answer facts) -> each text's answer as the model's
    # postprocess step gives it (evaluate.offline.predictions).
    predict: Callable[..., list]
    # (texts, gold, predicted, labels) -> the report of per-text predictions against the split's gold.
    score: Callable[[list, list, list, list[str]], dict]
    # A report (the kind's metric leads it) -> its plain-text table.
    format_report: Callable[[dict], str]
    # (text, prediction, outputs, index) -> prints one served answer (evaluate.served).
    show: Callable[[object, object, dict, int], None]
    # (record, static model, ONNX path, split file) -> {"paddle": report, "onnx": report}: a staged kind's own offline
    # reading (Kind.staged: its answers come from staged model runs, not one batch of logits); None: read by
    # evaluate.offline.
    offline: Callable[..., dict] | None = None
