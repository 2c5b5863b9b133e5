"""What each kind's JSON (kinds/<kind>/gateway.py) is made of: its record (KindJson), and the checks of a request's
`parameters` object the kinds share.
A parameter of the wrong type or of a value this model cannot honour is refused by name (core.errors.BadRequest),
never guessed at; a parameter a contract defines that changes nothing here is accepted and documented
(docs/GATEWAY.md)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ernie_deploy.core.errors import BadRequest
from ernie_deploy.core.spec import ModelSpec


def top_k(parameters: dict) -> int | None:
    """Hugging Face's `top_k`: how many of the best labels to answer (None: all there are)."""
    value = parameters.get("top_k")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadRequest(f"parameters.top_k is {value!r}", "send a whole number of at least 1, or leave it out")
    return value


# Hugging Face's text-classification pipeline's `function_to_apply`: what turns a label's logit into its score.
FUNCTIONS = ("softmax", "sigmoid", "none")


def function_to_apply(parameters: dict, computed: str) -> str:
    """The function a request's scores come from: `function_to_apply` where sent, else the model's own (`computed`:
    "softmax" for a label per text, "sigmoid" for a set of labels), as that pipeline defaults it."""
    value = parameters.get("function_to_apply")
    if value is None:
        return computed
    if value not in FUNCTIONS:
        raise BadRequest(
            f"parameters.function_to_apply is {value!r}",
            f"send one of {', '.join(map(repr, FUNCTIONS))}, or leave it out for {computed!r}",
        )
    return value


def apply(function: str, logits: np.ndarray) -> np.ndarray:
    """`function` over each row of `logits` [texts, labels]."""
    logits = logits.astype(np.float64)
    if function == "sigmoid":
        return 1.0 / (1.0 + np.exp(-logits))
    if function == "softmax":
        shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
        return shifted / shifted.sum(axis=-1, keepdims=True)
    return logits


def scores_needed(parameters: dict, computed: str) -> tuple[str, ...]:
    """What a request's every-label scores are read from: the served probabilities (core.tasks.ON_REQUEST) where the
    function is the model's own, else the raw logits, which the gateway applies the function to."""
    return ("probabilities",) if function_to_apply(parameters, computed) == computed else ("logits",)


def ranked(answers: dict, labels, parameters: dict, computed: str, k: int | None) -> list[list[dict]]:
    """Per text the `k` best labels of all (None: every label), best first, each with its score under the request's
    function (the served probabilities where it is the model's own)."""
    function = function_to_apply(parameters, computed)
    if function == computed:
        scores = answers["probabilities"]
    else:
        scores = apply(function, answers["logits"])
    scores = scores.reshape(len(scores), -1)
    out = []
    for row in scores:
        order = np.argsort(-row, kind="stable")[:k]
        out.append([{"label": labels[i], "score": float(row[i])} for i in order])
    return out


def unit(vectors: np.ndarray) -> np.ndarray:
    """Each row of `vectors` [texts, dim] scaled to length 1 (float32), as TEI's `normalize` and OpenAI's embeddings
    answer them; computed in float64 so that each row's norm is 1 to float32's precision. A zero row stays zero (it
    has no direction to keep)."""
    wide = vectors.astype(np.float64)
    norms = np.linalg.norm(wide, axis=-1, keepdims=True)
    return (wide / np.where(norms > 0, norms, 1.0)).astype(np.float32)


def number(parameters: dict, name: str, low: float, high: float) -> float | None:
    """A number parameter within [low, high], or None where absent."""
    value = parameters.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise BadRequest(f"parameters.{name} is {value!r}", f"send a number from {low:g} to {high:g}, or leave it out")
    return float(value)


def strings(parameters: dict, name: str) -> list[str]:
    """A list of strings parameter ([] where absent)."""
    value = parameters.get(name)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BadRequest(f"parameters.{name} is {value!r}", "send a list of strings, or leave it out")
    return value


@dataclass(frozen=True)
class KindJson:
    """How one kind's answers become the gateway's JSON: the `JSON` of kinds/<kind>/gateway.py.

    simple_serving(answers, model, parameters) -> the `result` of SimpleServing's answer for all the texts (an
    object of columns, or for extraction a list of Taskflow's answers, one per text);
    hugging_face(answers, model, parameters) -> one Hugging Face answer per text. `answers` are the task's own
    tensors (client.wire.native_answers), first axis = texts. Both raise core.errors.BadRequest for a parameter the
    model cannot honour."""

    hf_task: str  # the Hugging Face pipeline the answers are (GET /info shows it)
    # How the Hugging Face Inference API answers one text (not a list): as a list holding its one answer (text
    # classification: huggingface_hub's text_classification reads it back with [0]), or as the answer itself.
    one_text_as_list: bool
    simple_serving: Callable[[dict, ModelSpec, dict], dict | list]
    hugging_face: Callable[[dict, ModelSpec, dict], list]
    # The answers computed on request only (core.tasks.ON_REQUEST) a Hugging Face request's parameters need; the
    # gateway asks Triton for them only then.
    asks: Callable[[dict], tuple[str, ...]] = lambda parameters: ()
