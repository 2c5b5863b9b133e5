"""A set of labels per text as the HTTP gateway's JSON (ernie_deploy.gateway).

SimpleServing's route answers as PaddleNLP's multi-label post handler does: `{"label": [[ids]], "confidence":
[[scores]]}`, per text the ids of the labels kept and their sigmoid scores. The labels kept are those over the
model's own per-label thresholds (chosen by `convert`); with `parameters.prob_limit`, as that handler reads it,
those over that one limit instead.

Hugging Face's text classification: per text every label with its sigmoid score, best first (`top_k`: the best k);
`function_to_apply` "softmax" or "none" (TEI's `raw_scores`) scores them from the served logits instead."""

from __future__ import annotations

import numpy as np

from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.gateway.parameters import KindJson, function_to_apply, number, ranked, top_k
from ernie_deploy.kinds.multi_label.client import decode

OWN = "sigmoid"


def simple_serving(answers: dict[str, np.ndarray], model: ModelSpec, parameters: dict) -> dict:

    limit = number(parameters, "prob_limit", 0.0, 1.0)
    scores = answers["scores"].reshape(len(answers["labels"]), -1)
    ids, confidences = [], []
    if limit is None:
        index = {label: i for i, label in enumerate(model.labels)}
        for item in answers["labels"].reshape(-1):
            kept = decode(item)
            ids.append([index[p["label"]] for p in kept])
            confidences.append([float(p["score"]) for p in kept])
    else:
        for row in scores:
            kept = [i for i, score in enumerate(row) if score > limit]
            ids.append(kept)
            confidences.append([float(row[i]) for i in kept])
    return {"label": ids, "confidence": confidences}


def asks(parameters: dict) -> tuple[str, ...]:
    # Its own scores are always served (`scores`); another function's come from the logits.
    return () if function_to_apply(parameters, OWN) == OWN else ("logits",)


def hugging_face(answers: dict[str, np.ndarray], model: ModelSpec, parameters: dict) -> list[list[dict]]:
    own = function_to_apply(parameters, OWN) == OWN
    answers = {**answers, "probabilities": answers["scores"]} if own else answers
    return ranked(answers, model.labels, parameters, OWN, top_k(parameters))


JSON = KindJson(
    "text-classification", one_text_as_list=True, simple_serving=simple_serving, hugging_face=hugging_face, asks=asks
)
