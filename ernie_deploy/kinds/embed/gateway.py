"""A vector per text as the HTTP gateway's JSON: SimpleServing's `{"embedding": [[floats]]}`, the model's vectors as
it pools them; and Hugging Face's feature extraction (TEI's /embed, what InferenceClient.feature_extraction reads),
one vector per text, each scaled to length 1 unless the request says `normalize: false`, as TEI answers."""

from __future__ import annotations

import numpy as np

from ernie_deploy.core.errors import BadRequest
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.gateway.parameters import KindJson, unit


def vectors(answers: dict[str, np.ndarray]) -> np.ndarray:
    """The answered vectors, float32 [texts, dim]."""
    out = np.asarray(answers["embedding"], dtype=np.float32)
    return out.reshape(len(out), -1)


def normalize(parameters: dict) -> bool:
    """TEI's `normalize` (true when left out): whether the vectors are answered at length 1."""
    value = parameters.get("normalize", True)
    if not isinstance(value, bool):
        raise BadRequest(f"normalize is {value!r}", "send true or false, or leave it out (true)")
    return value


def simple_serving(answers: dict[str, np.ndarray], model: ModelSpec, parameters: dict) -> dict:
    return {"embedding": vectors(answers).tolist()}


def hugging_face(answers: dict[str, np.ndarray], model: ModelSpec, parameters: dict) -> list[list[float]]:
    # A graph that normalizes already answers unit vectors: scaling them again changes nothing past float32's last bit.
    out = vectors(answers)
    return (unit(out) if normalize(parameters) else out).tolist()


# One text is answered as a list of its one vector, as TEI's /embed answers it (InferenceClient.feature_extraction
# reads it as a [1, dim] array).
JSON = KindJson("feature-extraction", one_text_as_list=True, simple_serving=simple_serving, hugging_face=hugging_face)
