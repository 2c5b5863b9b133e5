"""What the client layer reads of a kind: the object each kinds/<kind>/client.py defines (CLIENT), listed by
client.wire."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class KindClient:
    # One element of the task's prediction output -> what `evaluate` predicts offline (a label name, entities, ...).
    decode: Callable[[bytes], Any]
    # `decode` reads a text's whole row of the prediction output (a vector), not its one element.
    row: bool = False
    # The task's outputs PaddleNLP's wire writes otherwise (the kind's `paddlenlp_formats`), each element read back
    # with the text it answers as the native format.
    paddlenlp_readers: dict[str, Callable[[bytes, str], bytes]] = field(default_factory=dict)
