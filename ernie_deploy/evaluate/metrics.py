"""Scores and reports: accuracy with per-class P/R/F1 and a confusion matrix (scikit-learn) for label-per-text
tasks; entity-level P/R/F1 per type and overall (seqeval, strict IOB2) for token tasks; micro and macro F1 with
per-label P/R/F1 (scikit-learn, over the texts x labels decisions) for multi-label tasks."""

from __future__ import annotations


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


def entity_report(gold_tags: list[list[str]], predicted_tags: list[list[str]]) -> dict:
    """Entity-level scores over per-character BIO tags: an entity counts only when type, start and end all match
    (seqeval's strict mode, IOB2)."""
    from seqeval.metrics import classification_report as seqeval_report
    from seqeval.scheme import IOB2

    if len(gold_tags) != len(predicted_tags):
        raise ValueError(f"{len(gold_tags)} gold sequences but {len(predicted_tags)} predicted")
    table = seqeval_report(gold_tags, predicted_tags, mode="strict", scheme=IOB2, output_dict=True, zero_division=0)
    micro = table["micro avg"]
    types = sorted(k for k in table if not k.endswith(" avg"))
    return {
        "metric": "f1",
        "f1": float(micro["f1-score"]),
        "precision": float(micro["precision"]),
        "recall": float(micro["recall"]),
        "n": len(gold_tags),
        "entities": int(micro["support"]),
        "per_type": {
            t: {
                "precision": float(table[t]["precision"]),
                "recall": float(table[t]["recall"]),
                "f1": float(table[t]["f1-score"]),
                "support": int(table[t]["support"]),
            }
            for t in types
        },
        "macro_f1": float(table["macro avg"]["f1-score"]),
    }


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


def _score_labels(texts: list[str], gold: list[str], predicted: list[str], labels: list[str]) -> dict:
    return classification_report(gold, predicted, sorted(set(labels) | set(gold) | set(predicted)))


def _score_entities(texts: list[str], gold: list[list[str]], predicted: list[list[dict]], labels: list[str]) -> dict:
    from ernie_deploy.serving.entities import entities_to_char_bio

    return entity_report(gold, [entities_to_char_bio(ents, len(text)) for ents, text in zip(predicted, texts)])


def _score_label_sets(texts: list[str], gold: list[list[str]], predicted: list[list[dict]], labels: list[str]) -> dict:
    names = [[p["label"] for p in prediction] for prediction in predicted]
    return multi_label_report(gold, names, sorted(set(labels) | {n for row in (*gold, *names) for n in row}))


# How per-text predictions are scored, per task kind: label names against gold labels, entity lists against
# per-character BIO tags, or {"label", "score"} lists against gold label sets.
SCORERS = {"sequence": _score_labels, "token": _score_entities, "multi_label": _score_label_sets}


def score(task, texts: list[str], gold: list, predicted: list, labels: list[str] = ()) -> dict:
    """Score per-text predictions as the ensemble returns them (SCORERS). `labels`: the model's label names, listed
    in a classification report even when neither gold nor predictions use them."""
    return SCORERS[task.kind](texts, gold, predicted, list(labels))


def format_report(report: dict) -> str:
    """A plain-text table of the per-class (per-type) scores; for accuracy also the confusion matrix."""
    return FORMATTERS[report["metric"]](report)


def _format_class_report(report: dict) -> str:
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


def _format_entity_report(report: dict) -> str:
    lines = [f"{'type':<8} {'precision':>9} {'recall':>9} {'f1':>9} {'support':>8}"]
    for name, row in report["per_type"].items():
        lines.append(f"{name:<8} {row['precision']:>9.4f} {row['recall']:>9.4f} {row['f1']:>9.4f} {row['support']:>8}")
    lines.append(
        f"{'overall':<8} {report['precision']:>9.4f} {report['recall']:>9.4f} {report['f1']:>9.4f} "
        f"{report['entities']:>8}"
    )
    return "\n".join(lines)


def _format_multi_label_report(report: dict) -> str:
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


# A report names its metric; each kind of report has its own table.
FORMATTERS = {"accuracy": _format_class_report, "f1": _format_entity_report, "micro_f1": _format_multi_label_report}
