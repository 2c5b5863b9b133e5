"""Scores and reports of per-text predictions, as the ensemble returns them or `evaluate` makes them offline. How
each kind is scored and reported is the kind's (ernie_deploy/kinds/<kind>/evaluate.py): accuracy with per-class
scores for a label per text, entity F1 for entities, micro and macro F1 for label sets."""

from __future__ import annotations

from ernie_deploy.core.errors import BadOptionsError
from ernie_deploy.evaluate.kind_evaluate import KindEvaluate
from ernie_deploy.kinds import KINDS, layer_table
from ernie_deploy.kinds.multi_label.evaluate import EVALUATE as MULTI_LABEL
from ernie_deploy.kinds.sequence.evaluate import EVALUATE as SEQUENCE
from ernie_deploy.kinds.token.evaluate import EVALUATE as TOKEN
from ernie_deploy.kinds.uie.evaluate import EVALUATE as UIE

# The evaluation's table of the kinds: how each kind is predicted offline, scored, reported and shown
# (kinds/<kind>/evaluate.py), by the kind's name. A kind is one import above and one line here.
KIND_EVALUATE: dict[str, KindEvaluate] = layer_table(
    "evaluate",
    __name__,
    {
        "multi_label": MULTI_LABEL,
        "sequence": SEQUENCE,
        "token": TOKEN,
        "uie": UIE,
    },
    reads=lambda kind: kind.scored_per_text,
)
# A report names its metric (its kind's `metric`); each kind of report has its own table.
FORMATTERS = {KINDS[name].metric: evaluate.format_report for name, evaluate in KIND_EVALUATE.items()}


def kind_evaluate(task) -> KindEvaluate:
    """How `task`'s kind is predicted and scored text by text, or a refusal that names how a retrieval kind is
    scored instead."""
    if task.kind not in KIND_EVALUATE:
        raise BadOptionsError(
            f"a {task.name} model is not scored text by text: its answers are ranked over a corpus",
            f"score it by retrieval: python clients/{task.name}_grpc_client.py --data FILE (recall@10 and MRR@10)",
        )
    return KIND_EVALUATE[task.kind]


def score(task, texts: list[str], gold: list, predicted: list, labels: list[str] = ()) -> dict:
    """Score per-text predictions as the ensemble returns them, as their kind scores them: label names against gold
    labels, entity lists against per-character BIO tags, or {"label", "score"} lists against gold label sets.
    `labels`: the model's label names, listed in a classification report even when neither gold nor predictions use
    them."""
    return kind_evaluate(task).score(texts, gold, predicted, list(labels))


def format_report(report: dict) -> str:
    """A plain-text table of the per-class (per-type) scores; for accuracy also the confusion matrix."""
    return FORMATTERS[report["metric"]](report)
