"""Layouts: how a model's pipeline is split into Triton models, one module per layout (see base.Layout).

Adding a layout is one new module here holding a `Layout` subclass; it is found by walking this package.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import replace
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.tasks import TASK_PARAMETER, TASKS, TOKENIZER_STEP, TaskSpec, get_task
from ernie_deploy.repository.layouts.base import LAYOUT_PARAMETER, Layout, Parts
from ernie_deploy.repository.options import BuildOptions, check_options, check_task_options

# A repository built before layouts were recorded has ensembles: the one layout there was.
LEGACY_LAYOUT = "ensemble"
# `build` with no layout named (BuildOptions.layout "auto"): each model takes the first of these that fits it and
# the options, by the runtime of its model step. The order is measured (docs/BENCHMARKS.md, "The default layout"):
# on the python runtime one fused process answered a lone request 0.8-2.7 ms sooner than the three-step ensemble
# at every ERNIE 3.0 size, and did more at concurrency 8 from nano to medium (0.93x at base). `--cache` takes the
# ensemble, since Triton caches a fused model's refusals as answers (fused.py). On the ORT backend the model runs in
# C++ and only a python tokenizer hop is left before it, with the postprocess in the graph where the kind has one.
AUTO = "auto"
DEFAULT_LAYOUTS = {"python": ("fused", "ensemble"), "onnxruntime": ("graph-postprocess", "ensemble")}


def _discover() -> dict[str, Layout]:
    for module in pkgutil.iter_modules(__path__):
        if module.name != "base":
            importlib.import_module(f"{__name__}.{module.name}")
    found = {cls.name: cls() for cls in _subclasses(Layout)}
    return dict(sorted(found.items(), key=lambda item: (item[0] != LEGACY_LAYOUT, item[0])))


def _subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


LAYOUTS: dict[str, Layout] = _discover()


def get_layout(name: str) -> Layout:
    if name not in LAYOUTS:
        raise ErnieDeployError(f"unknown layout {name!r}", f"use one of {', '.join(LAYOUTS)}")
    return LAYOUTS[name]


def check_build_options(options: BuildOptions) -> Layout | None:
    """Refuse option combinations Triton would reject at load time or silently ignore; returns the layout (None for
    "auto": each model's is settled by `settle_layout`, once its kind is known)."""
    if options.layout == AUTO:
        check_options(options)
        _default_candidates(options)
        return None
    layout = get_layout(options.layout)
    check_options(options)
    layout.check_options(options)
    return layout


def _default_candidates(options: BuildOptions) -> list[Layout]:
    """The default layouts that can honour `options` on their runtime, in order; a refusal when none can."""
    order = DEFAULT_LAYOUTS.get(options.runtime)
    if order is None:
        raise ErnieDeployError(
            f"--layout auto needs the model step's runtime settled, got {options.runtime!r}",
            f"pass --runtime {' or '.join(DEFAULT_LAYOUTS)}, or name a --layout",
        )
    fitting, first_refusal = [], None
    for name in order:
        try:
            LAYOUTS[name].check_options(options)
        except ErnieDeployError as exc:
            first_refusal = first_refusal or exc
            continue
        fitting.append(LAYOUTS[name])
    if not fitting:
        raise first_refusal
    return fitting


def default_layout(task: TaskSpec, options: BuildOptions) -> Layout:
    """The layout `task`'s model gets when none is named: the first of DEFAULT_LAYOUTS[runtime] that fits it."""
    candidates = _default_candidates(options)
    for layout in candidates:
        if layout.fits(task, options) is None:
            return layout
    return candidates[-1]  # its refusal names the problem and the fix (layout.check)


def settle_layout(task: TaskSpec, options: BuildOptions) -> BuildOptions:
    """`options` with the layout `task`'s model is built in: the named one, or for "auto" its default."""
    if options.layout != AUTO:
        return options
    return replace(options, layout=default_layout(task, options).name)


def task_configs(
    task: TaskSpec,
    onnx_path: str | Path,
    options: BuildOptions,
    tokenizer_step: str = TOKENIZER_STEP,
    pad_token_id: int = 0,
    labels: list[str] | None = None,
    recorded_decoding: str | None = None,
) -> list[mc.ModelConfig]:
    """Every Triton model config of one model in `options.layout`, derived from the ONNX file (names and dims are
    checked, not assumed), the entry (the model users call) last. `labels` are needed by the graph-postprocess
    layout, whose model step outputs are those of the postprocess graph built from them. `recorded_decoding`: a token
    model's NER decoding as its export recorded it (options.ner_decoding overrides it)."""
    options = settle_layout(task, options)
    layout = check_build_options(options)
    check_task_options(task, options)
    layout.check(task, options)
    parts = Parts(task, Path(onnx_path), options, tokenizer_step, pad_token_id, labels, recorded_decoding)
    configs = layout.configs(parts)
    if options.response_cache:
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
    """The layout of served model `name` in a repository whose configs are `configs`: the one its entry records;
    a model built before layouts were recorded is recognised by its shape, here and nowhere else."""
    entry = configs[name]
    if LAYOUT_PARAMETER in entry.parameters:
        return get_layout(entry.parameters[LAYOUT_PARAMETER].string_value)
    if entry.platform != "ensemble":
        return LAYOUTS["fused"] if TASK_PARAMETER in entry.parameters else LAYOUTS[LEGACY_LAYOUT]
    steps = [s.model_name for s in entry.ensemble_scheduling.step]
    if len(steps) == 2:
        first = configs.get(steps[0])
        tokenizes_in_model = first is not None and "model_file" in first.parameters
        return LAYOUTS["tokenizer-in-model" if tokenizes_in_model else "graph-postprocess"]
    return LAYOUTS[LEGACY_LAYOUT]


def served_task(name: str, entry: mc.ModelConfig) -> TaskSpec | None:
    """The task of served model `name` as its entry records it (a repository built before models were named has only
    the demo ensembles, known by their default names); None for a Triton model users do not call."""
    if TASK_PARAMETER in entry.parameters:
        return get_task(entry.parameters[TASK_PARAMETER].string_value).named(name)
    if entry.platform != "ensemble":
        return None
    return {task.ensemble: task for task in TASKS.values()}.get(name)


__all__ = [
    "AUTO",
    "DEFAULT_LAYOUTS",
    "LEGACY_LAYOUT",
    "LAYOUTS",
    "Layout",
    "Parts",
    "cache_answers",
    "caches_answers",
    "check_build_options",
    "default_layout",
    "get_layout",
    "layout_of",
    "served_task",
    "settle_layout",
]
