"""How the client reads a label per text: one element of the `label` output."""

from __future__ import annotations


def decode(item: bytes) -> str:
    return item.decode("utf-8")


# Nothing of this kind is written otherwise under PaddleNLP's wire (Kind.paddlenlp_formats).
PADDLENLP_READERS: dict = {}
