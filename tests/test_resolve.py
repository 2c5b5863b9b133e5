"""resolve(record, overrides, settings): every open field of a model's record decided once, and a resolved record
resolved again with no overrides is itself (what a new version's build and `tune` rely on)."""

from __future__ import annotations

import pytest

from ernie_deploy.core.errors import BadOptionsError
from ernie_deploy.core.settings import ServingSettings
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.core.tasks import TASKS
from ernie_deploy.repository.layouts import LAYOUTS
from ernie_deploy.repository.options import BuildOptions, RecordOverrides
from ernie_deploy.repository.resolve import resolve, resolve_options, resolves

LABELS = {"token_cls": ("O", "B-PER", "I-PER")}


def _record(task: str) -> ModelSpec:
    return ModelSpec.new(task, labels=LABELS.get(task, ("a", "b")), trained_tokens=30)


@pytest.mark.parametrize("task", list(TASKS))
@pytest.mark.parametrize("layout", ["auto", *LAYOUTS])
def test_a_resolved_record_resolves_to_itself(task, layout):
    options = BuildOptions(runtime="python", layout=layout, instances=2)
    if not resolves(_record(task), options):
        return
    served = resolve_options(_record(task), options)
    assert None not in (served.layout, served.long_text, served.max_text_chars, served.io, served.serving)
    assert served.serving == options.settings and served.serving.instances == 2
    assert resolve(served, RecordOverrides(), served.serving) == served


def test_an_override_changes_its_field_and_another_reading_starts_from_its_defaults():
    served = resolve_options(_record("token_cls"), BuildOptions(runtime="python", window_size=16))
    assert (served.long_text, served.window_size, served.window_stride, served.window_cut) == (
        "window",
        16,
        7,
        "sentences",
    )
    assert resolve(served, RecordOverrides(max_text_chars=500), served.serving).window_size == 16
    head = resolve(served, RecordOverrides(long_text="head"), served.serving)
    assert (head.long_text, head.window_size, head.window_stride, head.window_cut) == ("head", None, None, None)
    assert head.max_text_chars == 100_000  # the cut reading's default limit, not the windows'
    # Windows not named take the length the model was trained on.
    assert resolve_options(_record("token_cls"), BuildOptions(runtime="python")).window_size == 30


def test_settings_are_the_ones_given_and_a_layout_that_cannot_take_them_is_refused():
    served = resolve(_record("seq_cls"), RecordOverrides(), ServingSettings(runtime="python", ort_threads=1))
    assert served.serving.ort_threads == 1 and served.layout == "fused"
    with pytest.raises(BadOptionsError, match="cache a refused request"):
        resolve(
            _record("seq_cls"), RecordOverrides(layout="fused"), ServingSettings(runtime="python", response_cache=True)
        )
    # "auto" picks a layout that can cache.
    cached = resolve(_record("seq_cls"), RecordOverrides(), ServingSettings(runtime="python", response_cache=True))
    assert cached.layout != "fused"
    with pytest.raises(BadOptionsError, match="runtime 'auto'"):
        resolve(_record("seq_cls"), RecordOverrides(), ServingSettings())
