"""Plan a build: every open fact of each model's record decided in one step, before anything is written.

`plan(records, options, backends)` returns each record as served. It settles what the whole build decides first
(`settle`: the model step's runtime, the layout asked for, the response cache, and for a new version of a served model
the layout and cache that model already has; its wire: `served_wire`), then decides each record's own facts
(repository.resolve: its layout, long-text reading and windows, limits, NER decoding, wire, extraction schema). A
multi-label model's thresholds are decided as `thresholds` says before its record is planned. Each default has one
home: the runtime's here (`pick_runtime`), the layouts' in repository.layouts.DEFAULT_LAYOUTS, the readings' and the
decoding's in serving.record_defaults. Every config, file and later stage reads the planned record and works out
none of it again.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ernie_deploy.core.errors import BadOptionsError, ErnieDeployError
from ernie_deploy.core.io import NATIVE
from ernie_deploy.core.settings import AUTO
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.repository.options import BuildOptions, require_settled
from ernie_deploy.repository.resolve import resolve
from ernie_deploy.serving.multi_label import THRESHOLDS_FILE, check_thresholds, read_thresholds


@dataclass(frozen=True)
class ServedModel:
    """What a repository already serves of the model a new version joins, which the version keeps."""

    name: str
    layout: str | None  # repository.layouts.LAYOUTS; None: the repository has no such model
    caches: bool  # whether Triton caches its answers (`build --cache`)

    @classmethod
    def read(cls, repository: str | Path, name: str) -> ServedModel:
        """Model `name` as `repository` serves it (layout None and no cache where it serves no such model: the
        version's build then refuses it with its fix)."""
        from ernie_deploy.repository.layouts import caches_answers
        from ernie_deploy.repository.served import served_layouts
        from ernie_deploy.repository.versions import VersionedModel

        layout = served_layouts(repository).get(name) if Path(repository).is_dir() else None
        try:
            caches = caches_answers(VersionedModel.read(repository, name).entry)
        except ErnieDeployError:
            caches = False
        return cls(name, layout.name if layout else None, caches)


def pick_runtime(backends: Iterable[str]) -> str:
    """Runtime "auto": the ORT backend where the target server has it, else the python-backend model step, which
    runs on any tritonserver."""
    return "onnxruntime" if "onnxruntime" in set(backends) else "python"


def served_wire(name: str, served_io: str | None, asked_io: str | None) -> str:
    """The wire a new version of served model `name` answers in: the one its clients already speak (core.io); a
    refusal where another was asked for."""

    served = served_io or NATIVE
    if asked_io is not None and asked_io != served:
        raise BadOptionsError(
            f"{name!r} answers its clients in the {served} wire, this version was asked for in {asked_io}: the "
            "tensors clients send and read are the model's, not a version's",
            f"build the version with --io {served} (or leave --io out); another wire is a new model: another --model",
        )
    return served


def settle(
    options: BuildOptions, backends: Iterable[str] | None = None, served: ServedModel | None = None
) -> BuildOptions:
    """`options` with what the whole build decides settled, and checked against the layout asked for: no layout
    ("auto") stays "auto" (each model then gets the default one for its kind) except for a new version of `served`,
    which keeps the layout and cache it is served with; runtime "auto" becomes the ORT backend where `backends` (the
    target server's) have it and the layout can use it, else the python model step. `backends` None: the runtime
    must already be settled (a refusal where it is not). Settling settled options changes nothing."""
    from ernie_deploy.repository.layouts import check_build_options, get_layout

    if backends is None:
        require_settled(options)
    named = options.layout if options.layout != AUTO else None
    layout = named or (served.layout if served else None) or AUTO
    runtime = options.runtime
    if runtime == AUTO and layout != AUTO and "onnxruntime" not in get_layout(layout).runtimes:
        runtime = "python"  # the layout runs onnxruntime inside a python model, whatever backends the server has
    if runtime == AUTO:
        runtime = pick_runtime(backends)
    # A new version keeps the model's cache, as its layout.
    cache = options.response_cache or (served is not None and served.caches)
    if (layout, runtime, cache) != (options.layout, options.runtime, options.response_cache):
        options = replace(options, layout=layout, runtime=runtime, response_cache=cache)  # checked as it is made
    check_build_options(options)
    return options


def thresholds(record: ModelSpec, thresholds_file: Path | None, beside: Path) -> dict[str, float] | None:
    """The thresholds a multi-label model is served with, checked against its labels: `thresholds_file` where given,
    else those `convert` recorded, else the thresholds file `convert` wrote in `beside` (the ONNX model's folder);
    None for a model whose task has none."""
    if not record.task_spec.per_label_thresholds:
        return None

    labels = list(record.labels)
    if thresholds_file is None and record.thresholds is not None:
        return check_thresholds(record.thresholds, labels, "the thresholds `convert` recorded")
    return read_thresholds(thresholds_file or beside / THRESHOLDS_FILE, labels)


def plan(
    records: Sequence[ModelSpec],
    options: BuildOptions,
    backends: Iterable[str] | None = None,
    served: ServedModel | None = None,
) -> list[ModelSpec]:
    """Each of `records` as served with `options` (settled as `settle` says, for the target server's `backends`, None
    where the runtime is named, and for a new version the model `served`), every open fact decided: a refusal that
    names the flag and its fix where one does not fit."""
    options = settle(options, backends, served)
    return [resolve(record, options.overrides, options.settings) for record in records]
