"""The build stage: converted models -> the Triton model repository. The runtime and the layout are settled
(repository.plan.settle, against the server found here) before any model is read, each model's record (model.json, as
`convert` completed it) is read, and the models are planned and added to the repository, or one model's new version
beside the serving one. The options were checked when they were made (repository.options)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ernie_deploy.core.errors import BadOptionsError, ErnieDeployError
from ernie_deploy.pipeline.locate import onnx_file, static_model
from ernie_deploy.repository.add_version import build_version
from ernie_deploy.repository.build import ModelArtifacts, build, model_artifacts
from ernie_deploy.repository.options import BuildOptions
from ernie_deploy.repository.plan import ServedModel, settle
from ernie_deploy.server.binary import available_backends, find_tritonserver


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
    """`options` settled (repository.plan.settle) before any model is read, for the server `tritonserver` (else the
    one found; none here yet: the python model step, which runs on any) and, for a new version of model
    `version_of`, that model as `repository` serves it: a bad combination is the user's first error."""

    served = ServedModel.read(repository, version_of) if version_of else None
    return settle(options, _backends(tritonserver), served)


def _backends(tritonserver: str | Path | None):
    """The backends of the server `tritonserver` (else the one found), looked up only when `settle` asks (runtime
    "auto" with a layout that can use the ORT backend); none where there is no server here yet."""

    try:
        yield from available_backends(find_tritonserver(tritonserver))
    except ErnieDeployError:  # no server here yet: the python model step runs on any tritonserver
        return


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
