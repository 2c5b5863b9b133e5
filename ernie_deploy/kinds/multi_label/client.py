"""How the client reads a set of labels: one element of the `labels` output, a JSON list of {"label", "score"}."""

from __future__ import annotations


def decode(item: bytes) -> list[dict]:
    from ernie_deploy.serving.multi_label import predictions_from_json

    return predictions_from_json(item)


# Nothing of this kind is written otherwise under PaddleNLP's wire (Kind.paddlenlp_formats).
PADDLENLP_READERS: dict = {}
