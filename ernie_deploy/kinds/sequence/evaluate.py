"""How a label per text is predicted offline, scored, reported and shown: accuracy with per-class
precision, recall and F1 and a confusion matrix (scikit-learn)."""

from __future__ import annotations

import numpy as np

from ernie_deploy.client.grpc_client import was_truncated
from ernie_deploy.evaluate.kind_evaluate import KindEvaluate
from ernie_deploy.serving.encoding import Encoded


def predict(labels: list[str], logits: np.ndarray, enc: Encoded, texts: list[str]) -> list:
    return [labels[i] for i in logits.argmax(-1)]


def classification_report(y_true: list[str], y_pred: list[str], labels: list[str]) -> dict:
    from sklearn.metrics import accuracy_score, confusion_matrix, precision_recall_fscore_support

    precision, recall, f1, support = precision_recall_fscore_support(y_true, y_pred, labels=labels, zero_division=0)
    return {
        "metric": "accuracy",
        "accuracy": float(accuracy_score(y_true, y_pred)),
        "n": len(y_true),
        "per_class": {
            label: {"precision": float(p), "recall": float(r), "f1": float(f), "support": int(s)}
            for label, p, r, f, s in zip(labels, precision, recall, f1, support)
        },
        "macro_f1": float(sum(f1) / len(f1)) if len(f1) else 0.0,
        "labels": labels,
        "confusion_matrix": confusion_matrix(y_true, y_pred, labels=labels).tolist(),
    }


def score(texts: list[str], gold: list[str], predicted: list[str], labels: list[str]) -> dict:
    return classification_report(gold, predicted, sorted(set(labels) | set(gold) | set(predicted)))


def format_report(report: dict) -> str:
    labels = report["labels"]
    width = max(12, *(len(label) for label in labels))
    lines = [f"{'class':<{width}} {'precision':>9} {'recall':>9} {'f1':>9} {'support':>8}"]
    for label in labels:
        row = report["per_class"][label]
        lines.append(
            f"{label:<{width}} {row['precision']:>9.4f} {row['recall']:>9.4f} {row['f1']:>9.4f} {row['support']:>8}"
        )
    lines.append(f"{'macro f1':<{width}} {'':>9} {'':>9} {report['macro_f1']:>9.4f} {report['n']:>8}")
    lines.append("")
    lines.append("confusion matrix (rows: true, columns: predicted)")
    short = [label[:6] for label in labels]
    lines.append(" " * width + " " + " ".join(f"{s:>6}" for s in short))
    for label, row in zip(labels, report["confusion_matrix"]):
        lines.append(f"{label:<{width}} " + " ".join(f"{v:>6}" for v in row))
    return "\n".join(lines)


def show(text, prediction: str, out: dict, i: int) -> None:
    shown = "\t".join(text) if isinstance(text, tuple) else text  # a pair: both texts
    cut = "\t(truncated: the model read max_seq_len tokens of it)" if was_truncated(out, i) else ""
    print(f"{prediction}\t{out['confidence'][i, 0]:.4f}\t{shown}{cut}")


# What the evaluation reads of this kind (listed in evaluate.metrics).
EVALUATE = KindEvaluate(predict=predict, score=score, format_report=format_report, show=show)
