"""Extraction answers as the HTTP gateway's JSON (ernie_deploy.gateway).

SimpleServing's taskflow route (POST /taskflow/<model>) answers `{"result": [answer per text]}`, each answer
Taskflow's `{type: [{"text", "start", "end", "probability", "relations": {...}}]}`: what PaddleNLP's UIE serving
examples read. The SimpleServing model route answers the same. The schema comes from `parameters.schema` on every route
(gateway.bodies.with_schema). Hugging Face has no pipeline for schema-driven extraction; its route
answers each text's spans as token classification does (one {"entity_group", "score", "word", "start", "end"} per
top-level span, its probability as the score), so a token-classification client reads the entities it asked for."""

from __future__ import annotations

import numpy as np

from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.gateway.parameters import KindJson
from ernie_deploy.kinds.uie.client import decode


def _answers(answers: dict[str, np.ndarray]) -> list[dict]:

    return [decode(item) for item in answers["result"].reshape(-1)]


def simple_serving(answers: dict[str, np.ndarray], model: ModelSpec, parameters: dict) -> list[dict]:
    """The `result` itself: a list of answers, one per text, as Taskflow returns them (the gateway wraps it)."""
    return _answers(answers)


def hugging_face(answers: dict[str, np.ndarray], model: ModelSpec, parameters: dict) -> list[list[dict]]:
    return [
        sorted(
            (
                {
                    "entity_group": kind,
                    "score": float(span["probability"]),
                    "word": span["text"],
                    "start": int(span["start"]),
                    "end": int(span["end"]),
                }
                for kind, spans in answer.items()
                for span in spans
            ),
            key=lambda e: (e["start"], e["end"], e["entity_group"]),
        )
        for answer in _answers(answers)
    ]


JSON = KindJson(
    "token-classification", one_text_as_list=False, simple_serving=simple_serving, hugging_face=hugging_face
)
