"""How the client reads a score per pair: one element of the `score` output."""

from __future__ import annotations

from ernie_deploy.client.kind_client import KindClient


def decode(item) -> float:
    return float(item)


# What the client layer reads of this kind (listed in client.wire).
CLIENT = KindClient(decode=decode)
