"""Entities as the HTTP gateway's JSON (ernie_deploy.gateway).

SimpleServing has no post handler for token models (its TokenClsModelHandler answers raw logits), so its route
answers this project's own: `{"entities": [[{"type", "start", "end", "text"}, ...], ...]}`, one list per text, the
entities as the model answers them (character offsets into the text, end exclusive).

Hugging Face's token classification: per text a list of {"entity_group", "score", "word", "start", "end"}: entities
are whole (B- and I- tokens joined, as its `simple` aggregation joins them). Each entity's score is the one the model
answers (serving.entity_scores: the mean, over its tokens, of the probability of the tag the decoding chose), as
Hugging Face's `simple` aggregation averages its tokens' scores. A model built with `--io paddlenlp` answers
PaddleNLP's {"pos", "label"}, which has no score: its entities answer 1.0."""

from __future__ import annotations

import numpy as np

from ernie_deploy.core.errors import BadRequest
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.gateway.parameters import KindJson, strings
from ernie_deploy.kinds.token.client import decode

# Hugging Face's aggregation strategies that answer whole entities, as the served ones are; "none" (one answer per
# token) is not served.
GROUPED = (None, "simple", "first", "average", "max")
SCORE = 1.0  # an entity's score where the wire carries none (PaddleNLP's; see the module docstring)


def _entities(answers: dict[str, np.ndarray]) -> list[list[dict]]:

    return [decode(item) for item in answers["entities"].reshape(-1)]


def simple_serving(answers: dict[str, np.ndarray], model: ModelSpec, parameters: dict) -> dict:
    return {"entities": _entities(answers)}


def hugging_face(answers: dict[str, np.ndarray], model: ModelSpec, parameters: dict) -> list[list[dict]]:
    strategy = parameters.get("aggregation_strategy")
    if strategy not in GROUPED:
        raise BadRequest(
            f"parameters.aggregation_strategy is {strategy!r}; this model answers whole entities, not tokens",
            f"leave it out, or send one of: {', '.join(s for s in GROUPED if s)}",
        )
    ignored = set(strings(parameters, "ignore_labels"))
    return [
        [
            {
                "entity_group": e["type"],
                "score": float(e.get("score", SCORE)),
                "word": e["text"],
                "start": int(e["start"]),
                "end": int(e["end"]),
            }
            for e in entities
            if e["type"] not in ignored
        ]
        for entities in _entities(answers)
    ]


JSON = KindJson(
    "token-classification", one_text_as_list=False, simple_serving=simple_serving, hugging_face=hugging_face
)
