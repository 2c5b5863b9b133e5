"""What a model record leaves open, decided as `build` serves it: the one home of each reading default.

`repository.plan` fills these into the record it plans (the record as served then says every fact itself); a reader
of a record `build` has not completed (an export's or a conversion's record: the offline evaluation, the parity gate)
asks the same functions, so that both read a long text, and decode entities, alike.
"""

from __future__ import annotations

from typing import NamedTuple

from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.serving.entities import DEFAULT_DECODING
from ernie_deploy.serving.windows import DEFAULT_CUT, default_head_tokens, default_stride


class Windows(NamedTuple):
    size: int  # tokens per window, [CLS] and [SEP] included
    stride: int  # tokens from one window's start to the next
    cut: str  # serving.windows.CUTS


def long_text(model) -> str:
    """How `model` (a core.spec.ModelSpec) reads a text longer than max_seq_len: as its record says, else its kind's
    first long-text mode (window for token models, head otherwise)."""
    return model.long_text or model.kind_facts.long_text_modes[0]


def window_size(model, stride: int | None) -> int:
    """Tokens per window where none is named: about the length the model was trained on
    (ModelSpec.window_default); a `stride` too long for such windows was chosen for windows of max_seq_len, which it
    keeps."""
    if stride is None or stride <= model.window_default - 2:
        return model.window_default
    return model.max_seq_len


def windows(model, size: int | None = None, stride: int | None = None, cut: str | None = None) -> Windows:
    """The windows `model` reads a long text in: `size`, `stride` and `cut` where given, else the record's, else the
    defaults: `window_size`, half a window apart (serving.windows.default_stride), cut into sentences."""
    stride = stride or model.window_stride
    size = size or model.window_size or window_size(model, stride)
    return Windows(size, stride or default_stride(size), cut or model.window_cut or DEFAULT_CUT)


def step_windows(model) -> Windows:
    """The windows a tokenizer step holds for `model`: the record's where it reads windows, else windows of
    max_seq_len (a tokenizer step shared by a classifier and a token model cuts windows for whichever asks)."""
    if model.long_text == "window":
        return windows(model)
    return Windows(model.max_seq_len, default_stride(model.max_seq_len), DEFAULT_CUT)


def head_tokens(model, given: int | None = None) -> int | None:
    """Tokens a head+tail cut keeps from the head: `given`, else the record's, else a quarter of the kept tokens
    (serving.windows.default_head_tokens); None where `model` does not read head_tail."""
    if long_text(model) != "head_tail":
        return None
    head = given if given is not None else model.head_tokens
    return default_head_tokens(model.max_seq_len) if head is None else head


def decoding(of, *given: str | None) -> str | None:
    """How a token model turns logits into entities: the first of `given` that is set, else what the record says
    (`of` a core.spec.ModelSpec), else serving.entities.DEFAULT_DECODING; None for a model or task (`of` a
    core.tasks.TaskSpec) of a kind without entities."""
    if not of.kind_facts.entities:
        return None
    recorded = of.ner_decoding if isinstance(of, ModelSpec) else None
    return next((d for d in (*given, recorded) if d), DEFAULT_DECODING)
