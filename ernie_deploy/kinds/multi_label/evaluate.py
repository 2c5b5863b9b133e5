"""How a set of labels per text is predicted offline, scored, reported and shown: micro and macro F1 with
per-label precision, recall and F1 (scikit-learn, over the texts x labels decisions)."""

from __future__ import annotations

import numpy as np

from ernie_deploy.evaluate.kind_evaluate import KindEvaluate
from ernie_deploy.serving.encoding import Encoded
from ernie_deploy.serving.multi_label import DEFAULT_THRESHOLD, labels_over, sigmoid


def predict(
    labels: list[str], logits: np.ndarray, enc: Encoded, texts: list[str], thresholds: dict[str, float] | None = None
) -> list:

    return labels_over(sigmoid(logits), labels, thresholds or dict.fromkeys(labels, DEFAULT_THRESHOLD))


def multi_label_report(y_true: list[list[str]], y_pred: list[list[str]], labels: list[str]) -> dict:
    """Multi-label scores: each (text, label) is one yes/no decision. Micro F1 pools every decision; macro F1 is
    the mean of the per-label F1s. A text with no labels is a valid answer (and a valid gold)."""
    from sklearn.metrics import precision_recall_fscore_support
    from sklearn.preprocessing import MultiLabelBinarizer

    if len(y_true) != len(y_pred):
        raise ValueError(f"{len(y_true)} gold label sets but {len(y_pred)} predicted")
    binarizer = MultiLabelBinarizer(classes=labels).fit([labels])
    gold, pred = binarizer.transform(y_true), binarizer.transform(y_pred)
    scores = {
        average: precision_recall_fscore_support(gold, pred, average=average, zero_division=0)[:3]
        for average in ("micro", "macro")
    }
    precision, recall, f1, support = precision_recall_fscore_support(gold, pred, average=None, zero_division=0)
    return {
        "metric": "micro_f1",
        "micro_f1": float(scores["micro"][2]),
        "micro_precision": float(scores["micro"][0]),
        "micro_recall": float(scores["micro"][1]),
        "macro_f1": float(scores["macro"][2]),
        "n": len(y_true),
        "labels": labels,
        "per_label": {
            label: {"precision": float(p), "recall": float(r), "f1": float(f), "support": int(s)}
            for label, p, r, f, s in zip(labels, precision, recall, f1, support)
        },
    }


def score(texts: list[str], gold: list[list[str]], predicted: list[list[dict]], labels: list[str]) -> dict:
    names = [[p["label"] for p in prediction] for prediction in predicted]
    return multi_label_report(gold, names, sorted(set(labels) | {n for row in (*gold, *names) for n in row}))


def format_report(report: dict) -> str:
    width = max(8, *(len(label) for label in report["labels"]))
    lines = [f"{'label':<{width}} {'precision':>9} {'recall':>9} {'f1':>9} {'support':>8}"]
    for name, row in report["per_label"].items():
        lines.append(
            f"{name:<{width}} {row['precision']:>9.4f} {row['recall']:>9.4f} {row['f1']:>9.4f} {row['support']:>8}"
        )
    support = sum(row["support"] for row in report["per_label"].values())
    lines.append(
        f"{'micro':<{width}} {report['micro_precision']:>9.4f} {report['micro_recall']:>9.4f} "
        f"{report['micro_f1']:>9.4f} {support:>8}"
    )
    lines.append(f"{'macro f1':<{width}} {'':>9} {'':>9} {report['macro_f1']:>9.4f} {report['n']:>8}")
    return "\n".join(lines)


def show(text: str, prediction: list[dict], out: dict, i: int) -> None:
    kept = ", ".join(f"{p['label']} {p['score']:.4f}" for p in prediction) or "(no label over its threshold)"
    print(f"{kept}\t{text}")


# What the evaluation reads of this kind (listed in evaluate.metrics).
EVALUATE = KindEvaluate(predict=predict, score=score, format_report=format_report, show=show)
