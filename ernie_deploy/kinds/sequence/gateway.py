"""A label per text (one text or a pair) as the HTTP gateway's JSON (ernie_deploy.gateway): SimpleServing's
`{"label": [ids], "confidence": [floats]}`, and Hugging Face's text classification, one list of {"label", "score"}
per text.

`top_k` answers the k best labels of all, best first (every label where k is at least their number), from the served
probabilities; left out, the best label alone, as Hugging Face's pipeline answers by default. `function_to_apply`
"sigmoid" or "none" (TEI's `raw_scores`) scores every label from the served logits instead."""

from __future__ import annotations

import numpy as np

from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.gateway.parameters import KindJson, function_to_apply, ranked, scores_needed, top_k

OWN = "softmax"


def simple_serving(answers: dict[str, np.ndarray], model: ModelSpec, parameters: dict) -> dict:
    """What PaddleNLP SimpleServing's classification post handler answers: each text's label id and the softmax
    probability of that label."""
    return {
        "label": [int(i) for i in answers["label_id"].reshape(-1)],
        "confidence": [float(c) for c in answers["confidence"].reshape(-1)],
    }


def _best_only(parameters: dict) -> bool:
    """Whether the served label and confidence answer the request alone (no other label's score is needed)."""
    return top_k(parameters) in (None, 1) and function_to_apply(parameters, OWN) == OWN


def asks(parameters: dict) -> tuple[str, ...]:
    return () if _best_only(parameters) else scores_needed(parameters, OWN)


def hugging_face(answers: dict[str, np.ndarray], model: ModelSpec, parameters: dict) -> list[list[dict]]:
    if not _best_only(parameters):
        return ranked(answers, model.labels, parameters, OWN, top_k(parameters) or 1)
    labels = answers["label"].reshape(-1)
    confidences = answers["confidence"].reshape(-1)
    return [
        [{"label": label.decode("utf-8") if isinstance(label, bytes) else str(label), "score": float(score)}]
        for label, score in zip(labels, confidences)
    ]


JSON = KindJson(
    "text-classification", one_text_as_list=True, simple_serving=simple_serving, hugging_face=hugging_face, asks=asks
)
