"""The windows a record reads a long text in, what the record does not say decided as `build` serves it: read by the
offline evaluation (evaluate.offline) and by the kinds' own readings (kinds/<kind>/evaluate.py)."""

from __future__ import annotations

from typing import NamedTuple

from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.serving.record_defaults import windows as record_windows


class Windows(NamedTuple):
    size: int  # tokens per window, [CLS] and [SEP] included
    stride: int  # tokens from one window's start to the next
    cut: str  # serving.windows.CUTS


def window_of(model: ModelSpec) -> Windows:
    """The windows `model` reads a long text in, as its record says; what it does not say is what `build` serves
    by default, decided where `build` decides it (serving.record_defaults.windows)."""
    return Windows(*record_windows(model))
