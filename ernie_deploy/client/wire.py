"""A served model's answers, read back from its wire (core.io) into the task's own tensors: what `decode_outputs`,
the soak, the rollout's probe and the HTTP gateway read, whatever wire the model answers in."""

from __future__ import annotations

import numpy as np

from ernie_deploy.client.kind_client import KindClient
from ernie_deploy.core.errors import BadRepositoryError
from ernie_deploy.core.io import Wire
from ernie_deploy.kinds import layer_table
from ernie_deploy.kinds.embed.client import CLIENT as EMBED
from ernie_deploy.kinds.multi_label.client import CLIENT as MULTI_LABEL
from ernie_deploy.kinds.rerank.client import CLIENT as RERANK
from ernie_deploy.kinds.sequence.client import CLIENT as SEQUENCE
from ernie_deploy.kinds.token.client import CLIENT as TOKEN
from ernie_deploy.kinds.uie.client import CLIENT as UIE

# The client layer's table of the kinds: what it reads of each (kinds/<kind>/client.py: how it decodes an answer, and
# reads back what PaddleNLP's wire writes otherwise), by the kind's name. A kind is one import above and one line here.
KIND_CLIENT: dict[str, KindClient] = layer_table(
    "client",
    __name__,
    {
        "embed": EMBED,
        "multi_label": MULTI_LABEL,
        "rerank": RERANK,
        "sequence": SEQUENCE,
        "token": TOKEN,
        "uie": UIE,
    },
)


def native_answers(wire: Wire, answers: dict[str, np.ndarray], texts: list[str], labels) -> dict[str, np.ndarray]:
    """`answers` (by wire name, first axis = texts) as the task's own outputs: each renamed back, what the wire writes
    otherwise read back with the text it answers, and a label per text named from `labels` where the wire answers
    only its id. Outputs the wire does not answer (`truncated` under PaddleNLP's) stay absent."""
    if wire.native:
        return dict(answers)
    out = {name: answers[wire_name] for name, wire_name in wire.outputs.items() if wire_name in answers}
    readers = KIND_CLIENT[wire.task.kind].paddlenlp_readers
    for name in wire.reformatted:
        column = out[name].reshape(len(texts), -1)[:, 0]
        read = [readers[name](bytes(item), text) for item, text in zip(column, texts)]
        out[name] = np.array(read, dtype=np.object_).reshape(-1, 1)
    if "label_id" in out and "label" not in out:
        ids = out["label_id"].reshape(-1)
        if len(ids) and (ids.min() < 0 or ids.max() >= len(labels)):
            raise BadRepositoryError(
                f"the model answered label ids {sorted(set(ids.tolist()))}, past its {len(labels)} labels",
                "check the served model's labels.json against its record (`ernie-deploy check`)",
            )
        out["label"] = np.array([labels[i].encode("utf-8") for i in ids], dtype=np.object_).reshape(-1, 1)
    return out
