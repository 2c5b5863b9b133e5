"""How the client reads entities: one element of the `entities` output, a JSON list."""

from __future__ import annotations

from ernie_deploy.client.kind_client import KindClient
from ernie_deploy.core.errors import BadRepositoryError
from ernie_deploy.serving.entities import entities_from_json, entities_to_json


def decode(item: bytes) -> list[dict]:

    return entities_from_json(item)


def read_paddlenlp_entities(item: bytes, text: str) -> bytes:
    """PaddleNLP's `OUTPUT` for one text (a list of {"pos": [start, end], "label"}, end inclusive, written as JSON by
    kinds/token/serving.py) back as the native `entities` JSON, each entity's text cut from the text sent."""
    import json

    try:
        spans = json.loads(item.decode("utf-8"))
        bounds = [(s["label"], int(s["pos"][0]), int(s["pos"][1]) + 1) for s in spans]
        entities = [{"type": kind, "start": a, "end": b, "text": text[a:b]} for kind, a, b in bounds]
    except (ValueError, TypeError, KeyError, IndexError, UnicodeDecodeError) as exc:
        raise BadRepositoryError(
            f'OUTPUT {item[:200]!r} is not a JSON list of {{"pos": [start, end], "label": ...}}: {exc}',
            "call a model built with --io paddlenlp, or read its answers as its wire says (ernie-deploy check)",
        ) from None
    return entities_to_json(entities)


# What the client layer reads of this kind (listed in client.wire), with the task's outputs PaddleNLP's wire writes
# otherwise (Kind.paddlenlp_formats), read back with the text they answer.
CLIENT = KindClient(decode=decode, paddlenlp_readers={"entities": read_paddlenlp_entities})
