"""How the client reads a label per text: one element of the `label` output."""

from __future__ import annotations

from ernie_deploy.client.kind_client import KindClient


def decode(item: bytes) -> str:
    return item.decode("utf-8")


# What the client layer reads of this kind (listed in client.wire); nothing of it is written otherwise under
# PaddleNLP's wire (Kind.paddlenlp_formats).
CLIENT = KindClient(decode=decode)
