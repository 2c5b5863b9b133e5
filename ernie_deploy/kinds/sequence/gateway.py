"""A label per text (one text or a pair) as the HTTP gateway's JSON (ernie_deploy.gateway): SimpleServing's
`{"label": [ids], "confidence": [floats]}`, and Hugging Face's text classification, one list of {"label", "score"}
per text.

The served answer holds the best label and its softmax probability only (core.tasks: label_id, label, confidence),
so a Hugging Face answer lists that one label: `top_k` of any size answers it, and `function_to_apply` may name
softmax only."""

from __future__ import annotations

import numpy as np

from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.gateway.parameters import KindJson, function_to_apply, top_k


def simple_serving(answers: dict[str, np.ndarray], model: ModelSpec, parameters: dict) -> dict:
    """What PaddleNLP SimpleServing's classification post handler answers: each text's label id and the softmax
    probability of that label."""
    return {
        "label": [int(i) for i in answers["label_id"].reshape(-1)],
        "confidence": [float(c) for c in answers["confidence"].reshape(-1)],
    }


def hugging_face(answers: dict[str, np.ndarray], model: ModelSpec, parameters: dict) -> list[list[dict]]:
    top_k(parameters)  # checked; the best label is the only one served, and every top_k holds it
    function_to_apply(parameters, "softmax")
    labels = answers["label"].reshape(-1)
    confidences = answers["confidence"].reshape(-1)
    return [
        [{"label": label.decode("utf-8") if isinstance(label, bytes) else str(label), "score": float(score)}]
        for label, score in zip(labels, confidences)
    ]


JSON = KindJson("text-classification", one_text_as_list=True, simple_serving=simple_serving, hugging_face=hugging_face)
