"""Layouts: how a model's pipeline is split into Triton models, one module per layout (see base.Layout).

Adding a layout is one new module here holding a `Layout` subclass, imported below and listed in LAYOUTS.
"""

from __future__ import annotations

from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from ernie_deploy.core.errors import BadOptionsError, BadRepositoryError, ErnieDeployError
from ernie_deploy.core.settings import AUTO, ServingSettings
from ernie_deploy.core.spec import REBUILD, SPEC_PARAMETER, ModelSpec, OldRecord
from ernie_deploy.core.tasks import TASK_PARAMETER, TOKENIZER_STEP
from ernie_deploy.repository.layouts.base import LAYOUT_PARAMETER, Layout, Parts
from ernie_deploy.repository.layouts.ensemble import Ensemble
from ernie_deploy.repository.layouts.fused import Fused
from ernie_deploy.repository.layouts.graph_postprocess import GraphPostprocess
from ernie_deploy.repository.layouts.tokenizer_in_model import TokenizerInModel
from ernie_deploy.repository.options import BuildOptions

# The layout listed first (and the one a model whose layout cannot fit falls back to naming in its refusal).
ENSEMBLE = "ensemble"
# `build` with no layout named (BuildOptions.layout AUTO): each model takes the first of these that fits it and
# the options, by the runtime of its model step. The order is measured (docs/BENCHMARKS.md, "The default layout"):
# on the python runtime one fused process answered a lone request 0.8-2.7 ms sooner than the three-step ensemble
# at every ERNIE 3.0 size, and did more at concurrency 8 from nano to medium (0.93x at base). `--cache` takes the
# ensemble, since Triton caches a fused model's refusals as answers (fused.py). On the ORT backend the model runs in
# C++ and only a python tokenizer hop is left before it, with the postprocess in the graph where the kind has one.
DEFAULT_LAYOUTS = {"python": ("fused", "ensemble"), "onnxruntime": ("graph-postprocess", "ensemble")}


# Every layout, by name: the ensemble (ENSEMBLE) first, then the others by name.
LAYOUTS: dict[str, Layout] = {
    layout.name: layout
    for layout in (
        Ensemble(),
        Fused(),
        GraphPostprocess(),
        TokenizerInModel(),
    )
}


def get_layout(name: str) -> Layout:
    if name not in LAYOUTS:
        raise BadOptionsError(f"unknown layout {name!r}", f"use one of {', '.join(LAYOUTS)}")
    return LAYOUTS[name]


def check_build_options(options: BuildOptions) -> Layout | None:
    """Refuse a layout that cannot take `options` (checked themselves when they were made: repository.options);
    returns the layout (None for "auto": each model's is settled by `repository.resolve`, once its kind is known)."""
    if options.layout == AUTO:
        _default_candidates(options)
        return None
    layout = get_layout(options.layout)
    layout.check_serving_settings(options)
    return layout


def _default_candidates(options: ServingSettings) -> list[Layout]:
    """The default layouts that can honour the settings `options` on their runtime, in order; a refusal when none
    can."""
    order = DEFAULT_LAYOUTS.get(options.runtime)
    if order is None:
        raise BadOptionsError(
            f"--layout auto needs the model step's runtime settled, got {options.runtime!r}",
            f"pass --runtime {' or '.join(DEFAULT_LAYOUTS)}, or name a --layout",
        )
    fitting, first_refusal = [], None
    for name in order:
        try:
            LAYOUTS[name].check_serving_settings(options)
        except ErnieDeployError as exc:
            first_refusal = first_refusal or exc
            continue
        fitting.append(LAYOUTS[name])
    if not fitting:
        raise first_refusal
    return fitting


def default_layout(model: ModelSpec) -> Layout:
    """The layout `model` (its reading and serving settings decided) gets when none is named: the first of
    DEFAULT_LAYOUTS[runtime] that fits it."""
    candidates = _default_candidates(model.serving)
    for layout in candidates:
        if layout.fits(model) is None:
            return layout
    return candidates[-1]  # its refusal names the problem and the fix (layout.check)


def task_configs(
    model: ModelSpec, onnx_path: str | Path, tokenizer_step: str = TOKENIZER_STEP, pad_token_id: int = 0
) -> list[mc.ModelConfig]:
    """Every Triton model config of `model` (its record as served: repository.resolve) in its layout, derived from
    the record and the ONNX file (names and dims are checked, not assumed), the entry (the model users call) last."""
    if model.layout is None or model.serving is None:
        raise BadOptionsError(
            f"model {model.name!r}: its record is not resolved (no layout or serving settings)",
            "resolve it first: ernie_deploy.repository.resolve.resolve(record, overrides, settings)",
        )
    layout = get_layout(model.layout)
    configs = layout.configs(Parts(model, Path(onnx_path), tokenizer_step, pad_token_id))
    if model.serving.response_cache:
        cache_answers(configs[-1])
    return configs


def cache_answers(entry: mc.ModelConfig) -> None:
    """Triton's response cache on the entry, and on it alone. Triton keys an answer by model name, version and the
    request's input tensors, and looks it up before running anything: a hit at the entry skips every step, while a
    miss there is a miss at every step too (each step's inputs follow from the text), so caching a step as well would
    only add lookups and copies. The key holds the entry's own version, not the versions an ensemble pins, and
    reloading an ensemble keeps its entries (measured on Triton 2.51: after a rollout that re-pinned the steps, the
    old version's cached answers kept coming back). So a caching ensemble's own version is the model version it
    serves (`VersionedModel.pinned` moves both), and an answer cached for version N is version N's answer. A fused
    model, whose entry is a python model, refuses the cache (layouts/fused.py says why)."""
    entry.response_cache.enable = True


def caches_answers(entry: mc.ModelConfig) -> bool:
    return entry.response_cache.enable


def layout_of(name: str, configs: dict[str, mc.ModelConfig]) -> Layout:
    """The layout of served model `name` in a repository whose configs are `configs`: the one its entry records."""
    entry = configs[name]
    if LAYOUT_PARAMETER not in entry.parameters:
        raise BadRepositoryError(
            f"served model {name!r} records no layout: it was built by an older ernie-deploy",
            "rebuild the repository with this version (`ernie-deploy check` names the command)",
        )
    return get_layout(entry.parameters[LAYOUT_PARAMETER].string_value)


def entry_record(name: str, entry: mc.ModelConfig) -> ModelSpec | None:
    """The record (core.spec) the entry of served model `name` carries; None for a Triton model users do not call (a
    step). An entry without one, built by an older version, is refused with the command that rebuilds it."""
    if TASK_PARAMETER not in entry.parameters:
        return None
    if SPEC_PARAMETER not in entry.parameters:
        raise OldRecord(
            f"served model {name!r} carries no model record: it was built by an older ernie-deploy",
            f"rebuild the repository with this version: {REBUILD}",
        )
    return ModelSpec.from_json(entry.parameters[SPEC_PARAMETER].string_value, f"{name}'s record")


__all__ = [
    "DEFAULT_LAYOUTS",
    "ENSEMBLE",
    "LAYOUTS",
    "Layout",
    "Parts",
    "cache_answers",
    "caches_answers",
    "check_build_options",
    "default_layout",
    "get_layout",
    "layout_of",
    "entry_record",
]
