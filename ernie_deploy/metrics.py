"""Scores and reports: accuracy with per-class P/R/F1 and a confusion matrix (scikit-learn)."""

from __future__ import annotations

import json
from pathlib import Path

from .paths import atomic_path


def classification_report(y_true: list[str], y_pred: list[str], labels: list[str]) -> dict:
    from sklearn.metrics import accuracy_score, confusion_matrix, precision_recall_fscore_support

    precision, recall, f1, support = precision_recall_fscore_support(
        y_true, y_pred, labels=labels, zero_division=0)
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


def format_report(report: dict) -> str:
    """A plain-text table: per-class scores, then the confusion matrix (rows true, columns predicted)."""
    labels = report["labels"]
    width = max(12, *(len(label) for label in labels))
    lines = [f"{'class':<{width}} {'precision':>9} {'recall':>9} {'f1':>9} {'support':>8}"]
    for label in labels:
        row = report["per_class"][label]
        lines.append(f"{label:<{width}} {row['precision']:>9.4f} {row['recall']:>9.4f} {row['f1']:>9.4f} {row['support']:>8}")
    lines.append(f"{'macro f1':<{width}} {'':>9} {'':>9} {report['macro_f1']:>9.4f} {report['n']:>8}")
    lines.append("")
    lines.append("confusion matrix (rows: true, columns: predicted)")
    short = [label[:6] for label in labels]
    lines.append(" " * width + " " + " ".join(f"{s:>6}" for s in short))
    for label, row in zip(labels, report["confusion_matrix"]):
        lines.append(f"{label:<{width}} " + " ".join(f"{v:>6}" for v in row))
    return "\n".join(lines)


def write_json(report: dict, path: str | Path) -> None:
    with atomic_path(Path(path)) as tmp:
        tmp.write_text(json.dumps(report, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
