"""How the client reads an extraction answer (one element of the `result` output, Taskflow's JSON for one text), and
the extraction client script (clients/uie_grpc_client.py): answers for a few texts, or span F1 on a split."""

from __future__ import annotations

import json

from ernie_deploy.client.kind_client import KindClient
from ernie_deploy.core.errors import BadRepositoryError


def decode(item: bytes) -> dict:

    try:
        answer = json.loads(item.decode("utf-8") if isinstance(item, bytes) else item)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRepositoryError(
            f"result {item[:200]!r} is not JSON: {exc}", "call a model built with `ernie-deploy build --task uie`"
        ) from None
    if not isinstance(answer, dict):
        raise BadRepositoryError(
            f"result {item[:200]!r} is not a JSON object of types", "call a model built with `ernie-deploy build`"
        )
    return answer


# What the client layer reads of this kind (listed in client.wire); nothing of it is written otherwise under
# PaddleNLP's wire (Kind.paddlenlp_formats).
CLIENT = KindClient(decode=decode)
