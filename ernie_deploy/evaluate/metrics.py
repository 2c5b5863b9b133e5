"""Scores and reports of per-text predictions, as the ensemble returns them or `evaluate` makes them offline. How
each kind is scored and reported is the kind's (ernie_deploy/kinds/<kind>/evaluate.py): accuracy with per-class
scores for a label per text, entity F1 for entities, micro and macro F1 for label sets."""

from __future__ import annotations

from ernie_deploy.kinds import table

# How per-text predictions are scored, per task kind: label names against gold labels, entity lists against
# per-character BIO tags, or {"label", "score"} lists against gold label sets.
SCORERS = table("evaluate", "score")
# A report names its metric (its kind's `metric`); each kind of report has its own table.
FORMATTERS = table("evaluate", "format_report", key=lambda kind: kind.metric)


def score(task, texts: list[str], gold: list, predicted: list, labels: list[str] = ()) -> dict:
    """Score per-text predictions as the ensemble returns them (SCORERS). `labels`: the model's label names, listed
    in a classification report even when neither gold nor predictions use them."""
    return SCORERS[task.kind](texts, gold, predicted, list(labels))


def format_report(report: dict) -> str:
    """A plain-text table of the per-class (per-type) scores; for accuracy also the confusion matrix."""
    return FORMATTERS[report["metric"]](report)
