"""How the client reads entities: one element of the `entities` output, a JSON list."""

from __future__ import annotations


def decode(item: bytes) -> list[dict]:
    from ernie_deploy.serving.entities import entities_from_json

    return entities_from_json(item)
