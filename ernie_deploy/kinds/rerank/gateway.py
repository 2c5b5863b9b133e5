"""A score per (query, text) pair as the HTTP gateway's JSON: SimpleServing's `{"score": [floats]}`, and Hugging
Face's text classification of a pair, one `[{"label": "relevant", "score"}]` per pair (TEI's /predict of a
reranker). TEI's /rerank (a query against many texts, best first) is the gateway's own route (gateway.retrieval)."""

from __future__ import annotations

import numpy as np

from ernie_deploy.core.errors import BadRequest
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.gateway.parameters import KindJson, apply, function_to_apply, top_k

# The one label a pair is scored for.
RELEVANT = "relevant"


def scores(answers: dict[str, np.ndarray]) -> list[float]:
    """The model's score per pair: P(relevant), or the raw logit for a model exported with `--score raw`."""
    return [float(s) for s in np.asarray(answers["score"]).reshape(-1)]


def simple_serving(answers: dict[str, np.ndarray], model: ModelSpec, parameters: dict) -> dict:
    return {"score": scores(answers)}


def _function(parameters: dict) -> str | None:
    """The function a request's scores come from, None for the model's own score. Softmax over a pair's one logit is
    1 whatever the pair: refused rather than answered."""
    if parameters.get("function_to_apply") is None:
        return None
    function = function_to_apply(parameters, "sigmoid")
    if function == "softmax":
        raise BadRequest(
            "parameters.function_to_apply is 'softmax', and a rerank model answers one logit per pair (softmax "
            "over one label is always 1)",
            "send 'sigmoid' for P(relevant), 'none' (or raw_scores: true) for the logit, or leave it out for the "
            "model's own score",
        )
    return function


def hugging_face(answers: dict[str, np.ndarray], model: ModelSpec, parameters: dict) -> list[list[dict]]:
    top_k(parameters)  # checked; one label is every label there is
    function = _function(parameters)
    if function is None:
        values = scores(answers)
    else:
        logits = np.asarray(answers["logits"], dtype=np.float32).reshape(-1, 1)
        values = [float(v) for v in apply(function, logits).reshape(-1)]
    return [[{"label": RELEVANT, "score": value}] for value in values]


def asks(parameters: dict) -> tuple[str, ...]:
    # The logit is computed and sent only for a request that names a function (TEI's raw_scores is "none").
    return ("logits",) if parameters.get("function_to_apply") is not None else ()


JSON = KindJson(
    "text-classification", one_text_as_list=True, simple_serving=simple_serving, hugging_face=hugging_face, asks=asks
)
