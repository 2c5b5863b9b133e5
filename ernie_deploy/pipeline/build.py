"""The build stage: converted models -> the Triton model repository. The runtime and the layout are settled and the
options checked before any model is read, each model's record (model.json, as `convert` completed it) is read, and
the models are added to the repository, or one model's new version beside the serving one."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ernie_deploy.core.errors import BadOptionsError, ErnieDeployError
from ernie_deploy.pipeline.locate import onnx_file, static_model
from ernie_deploy.pipeline.options import AUTO
from ernie_deploy.repository.build import ModelArtifacts, model_artifacts
from ernie_deploy.repository.layouts import AUTO as AUTO_LAYOUT
from ernie_deploy.repository.layouts import check_build_options, get_layout
from ernie_deploy.repository.options import BuildOptions


@dataclass(frozen=True)
class Built:
    written: list[Path]  # the configs written (a new version: its version folders)
    options: BuildOptions  # as built: the runtime and layout chosen


def resolve_build_options(
    options: BuildOptions,
    repository: str | Path,
    *,
    version_of: str | None = None,
    tritonserver: str | Path | None = None,
) -> BuildOptions:
    """`options` settled and checked before any model is read (a bad combination is the user's first error). No
    layout ("auto"): each model the default one for its kind (settled per model), or for a new version of model
    `version_of` the layout it is served in. Runtime "auto":
    the ORT backend where the server (`tritonserver`, else the one found) has it and the layout can use it, else
    the python model step."""
    from ernie_deploy.repository.build import pick_runtime
    from ernie_deploy.server.binary import available_backends, find_tritonserver

    named = options.layout if options.layout != AUTO_LAYOUT else None
    layout = named or (_served_layout(repository, version_of) if version_of else None) or AUTO_LAYOUT
    runtime = options.runtime
    if runtime == AUTO and layout != AUTO_LAYOUT and "onnxruntime" not in get_layout(layout).runtimes:
        runtime = "python"  # the layout runs onnxruntime inside a python model, whatever backends the server has
    if runtime == AUTO:
        try:
            backends = available_backends(find_tritonserver(tritonserver))
        except ErnieDeployError:  # no server here yet: the python model step runs on any tritonserver
            backends = set()
        runtime = pick_runtime(backends)
    options = replace(options, layout=layout, runtime=runtime)
    if version_of and not options.response_cache and _served_caches(repository, version_of):
        options = replace(options, response_cache=True)  # a new version keeps the model's cache, as its layout
    check_build_options(options)
    return options


def _served_caches(repository: str | Path, name: str) -> bool:
    """Whether model `name` in `repository` caches its answers (`build --cache`)."""
    from ernie_deploy.repository.layouts import caches_answers
    from ernie_deploy.repository.versions import VersionedModel

    try:
        return caches_answers(VersionedModel.read(repository, name).entry)
    except ErnieDeployError:  # no such model: build_version says so with its fix
        return False


def _served_layout(repository: str | Path, name: str) -> str | None:
    """The layout model `name` is served in (a new version keeps it), or None where the repository has no such model."""
    from ernie_deploy.repository.served import served_layouts

    layout = served_layouts(repository).get(name) if Path(repository).is_dir() else None
    return layout.name if layout else None


def build_models(
    models: Sequence[str | ModelArtifacts],
    options: BuildOptions,
    repository: str | Path,
    version: int | None = None,
    *,
    thresholds_file: str | Path | None = None,
    tritonserver: str | Path | None = None,
    log: Callable[[str], None] | None = None,
) -> Built:
    """Add or replace `models` (model names, whose converted artifacts are read by name, or ModelArtifacts) in
    `repository`; with `version`, add that version of the one model beside the one serving. `thresholds_file`: a
    multi-label model's thresholds file instead of the ones `convert` chose (one such model only). `log` takes a
    line per file written, and one per model on its reference profile (repository.reference)."""
    from ernie_deploy.repository.build import build

    log = log or (lambda line: None)
    names = [m if isinstance(m, str) else m.name for m in models]
    if version is not None and len(names) != 1:
        raise BadOptionsError("--version adds a version of one model", "pass exactly one --model with it")
    options = resolve_build_options(
        options, repository, version_of=names[0] if version is not None else None, tritonserver=tritonserver
    )
    entries = [_artifacts(m) if isinstance(m, str) else m for m in models]
    if thresholds_file:
        if len(entries) != 1 or not entries[0].model.task_spec.per_label_thresholds:
            raise BadOptionsError(
                "--thresholds replaces one multi-label model's thresholds; this build has "
                + ", ".join(f"{e.name} ({e.model.task})" for e in entries),
                "build exactly one multi_label model with it (--task multi_label or --model N)",
            )
        entries[0] = replace(entries[0], thresholds_file=Path(thresholds_file))
    if version is not None:
        from ernie_deploy.repository.add_version import build_version

        written = build_version(entries[0], repository, options, version=version, log=log)
    else:
        written = build(entries, repository, options, log=log)
    for path in written:
        log(f"wrote {path}")
    return Built(written, options)


def _artifacts(name: str) -> ModelArtifacts:
    """What the build reads of model `name`: its record as `convert` completed it, beside its converted model."""
    static = static_model(None, None, name)
    return model_artifacts(static, onnx_file(static, None, name), name)
