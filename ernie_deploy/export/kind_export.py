"""What the export reads of a kind whose checkpoint its own code reads (Kind.own_export): the object each
kinds/<kind>/export.py defines (EXPORT), listed by export.static."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class KindExport:
    # (checkpoint, the export's options by name) -> the facts the model records (core.spec.ModelSpec fields), read
    # from the checkpoint's files alone; a checkpoint or an option the kind cannot serve is refused by name here,
    # before anything is written (`add` runs it up front).
    facts: Callable[..., dict]
    # (checkpoint root, the recorded facts) -> the paddle Layer the static model is saved from, in eval mode: its
    # forward takes input_ids and token_type_ids (int64 [batch, seq]) and answers one tensor, the model's output.
    layer: Callable[..., object]
    # The export options it reads (ExportOptions fields, `export --NAME`), each refused for the other kinds.
    options: tuple[str, ...] = ()
