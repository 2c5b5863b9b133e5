"""How the client reads a set of labels: one element of the `labels` output, a JSON list of {"label", "score"}."""

from __future__ import annotations

from ernie_deploy.client.kind_client import KindClient
from ernie_deploy.serving.multi_label import predictions_from_json


def decode(item: bytes) -> list[dict]:

    return predictions_from_json(item)


# What the client layer reads of this kind (listed in client.wire); nothing of it is written otherwise under
# PaddleNLP's wire (Kind.paddlenlp_formats).
CLIENT = KindClient(decode=decode)
