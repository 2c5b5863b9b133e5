"""What each kind's JSON (kinds/<kind>/gateway.py) is made of: its record (KindJson), and the checks of a request's
`parameters` object the kinds share.
A parameter of the wrong type or of a value this model cannot honour is refused by name (core.errors.BadRequest),
never guessed at; a parameter a contract defines that changes nothing here is accepted and documented
(docs/GATEWAY.md)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

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


def function_to_apply(parameters: dict, computed: str) -> None:
    """Hugging Face's `function_to_apply`: accepted when it names the function the model's scores come from
    (`computed`: "softmax" for a label per text, "sigmoid" for a set of labels); the raw logits are not served."""
    value = parameters.get("function_to_apply")
    if value is None or value == computed:
        return
    raise BadRequest(
        f"parameters.function_to_apply is {value!r}, but this model answers {computed} scores only (its logits are "
        "not served)",
        f"leave function_to_apply out, or send {computed!r}",
    )


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
