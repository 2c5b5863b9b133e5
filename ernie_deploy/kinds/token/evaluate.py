"""How entities are predicted offline, scored, reported and shown: entity-level precision, recall and F1 per
type and overall (seqeval, strict IOB2) over per-character BIO tags."""

from __future__ import annotations

import json

import numpy as np

from ernie_deploy.client.grpc_client import was_truncated
from ernie_deploy.evaluate.kind_evaluate import KindEvaluate
from ernie_deploy.evaluate.tables import type_table
from ernie_deploy.serving.encoding import Encoded
from ernie_deploy.serving.entities import DEFAULT_DECODING, batch_entities, entities_to_char_bio


def predict(
    labels: list[str], logits: np.ndarray, enc: Encoded, texts: list[str], decoding: str | tuple = DEFAULT_DECODING
) -> list:
    return decoded_entities(labels, logits, enc.lengths, enc.offsets, texts, decoding)


def decoded_entities(labels: list[str], logits, lengths, offsets, texts: list[str], decoding: str | tuple) -> list:
    """Each text's entities under `decoding` (serving.entities.DECODINGS), with their scores, as TokenClsPostprocess
    answers them; with a tuple of decodings, a dict {decoding: entities} per text (one model run scored under each)."""

    if not isinstance(decoding, str):
        each = {d: batch_entities(texts, logits, lengths, offsets, labels, d, scored=True) for d in decoding}
        return [{d: each[d][i] for d in decoding} for i in range(len(texts))]
    return batch_entities(texts, logits, lengths, offsets, labels, decoding, scored=True)


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


def score(texts: list[str], gold: list[list[str]], predicted: list[list[dict]], labels: list[str]) -> dict:

    return entity_report(gold, [entities_to_char_bio(ents, len(text)) for ents, text in zip(predicted, texts)])


def format_report(report: dict) -> str:
    overall = {"precision": report["precision"], "recall": report["recall"], "f1": report["f1"]}
    return type_table(report["per_type"], {**overall, "support": report["entities"]})


def show(text: str, prediction: list[dict], out: dict, i: int) -> None:
    note = "  (truncated: entities past max_seq_len are not found)" if was_truncated(out, i) else ""
    print(f"{text}{note}")
    print(entity_lines(prediction))


def entity_lines(prediction: list[dict]) -> str:
    """The entities as one JSON list, an entity to a line: what `json.loads` reads, and short enough to read."""
    if not prediction:
        return "[]"
    # A score to four decimals, as the classifiers print their probabilities: what a reader compares.
    shown = [{**e, "score": round(e["score"], 4)} if "score" in e else e for e in prediction]
    return "[\n" + ",\n".join(f"  {json.dumps(e, ensure_ascii=False)}" for e in shown) + "\n]"


# What the evaluation reads of this kind (listed in evaluate.metrics).
EVALUATE = KindEvaluate(predict=predict, score=score, format_report=format_report, show=show)
