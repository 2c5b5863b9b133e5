"""A deployment file carried out: every model through fetch, export and convert, then one build of them all, and the
models the file no longer lists removed, so the repository holds exactly what the file says
(repository.deployment says what the file holds).

`plan` reads every stage's options into the typed options the commands fill and checks them, naming a bad one by its
place in the file, before anything runs; `deploy` prints the plan and, unless it is a dry run, carries it out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from ernie_deploy.core.errors import BadOptionsError, ErnieDeployError
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.core.tasks import get_task
from ernie_deploy.export.static import recorded_decoding
from ernie_deploy.fetch.datasets import prepare
from ernie_deploy.pipeline.build import build_models, resolve_build_options
from ernie_deploy.pipeline.convert import convert_model
from ernie_deploy.pipeline.options import (
    AUTO,
    ConvertOptions,
    ExportOptions,
    FetchOptions,
    build_options_from_mapping,
    changed,
)
from ernie_deploy.pipeline.stages import export_model, fetch_model
from ernie_deploy.repository.build import remove
from ernie_deploy.repository.deployment import BOOTSTRAP, Deployment, ModelEntry, load_deployment
from ernie_deploy.repository.options import BuildOptions
from ernie_deploy.repository.resolve import decides_decoding
from ernie_deploy.repository.served import Existing

# What apply sets itself from the model's fields and the file's `repository`: a stage's options may not.
SET_BY_APPLY = {"name", "task", "source", "sha256", "bootstrap", "out", "checkpoint", "static", "onnx", "repository"}
Log = Callable[[str], None]


@dataclass(frozen=True)
class ModelPlan:
    where: str  # its place in the file: models[i]
    entry: ModelEntry
    fetch: FetchOptions
    export: ExportOptions
    convert: ConvertOptions


@dataclass(frozen=True)
class Plan:
    deployment: Deployment
    datasets: tuple[str, ...]  # prepared first: the parity check of convert reads their test splits
    models: tuple[ModelPlan, ...]
    build: BuildOptions  # runtime "auto" and no layout are settled when the build runs, as `ernie-deploy build` does
    stale: tuple[str, ...]  # served models the file does not list, removed after the build

    @property
    def names(self) -> list[str]:
        return [m.entry.name for m in self.models]


@dataclass(frozen=True)
class Step:
    where: str  # what a failure is reported under
    title: str  # the line the plan shows
    action: Callable[[], Any]
    # The state a failure leaves: every step before the removal changes the repository all at once or not at all.
    after_failure: str = "the repository was left as it was"


def _checked(where: str, check: Callable[[], Any]) -> Any:
    """check(), its error named with `where` (a place in the deployment file)."""
    try:
        return check()
    except ErnieDeployError as exc:  # named with its place, and of its own type still
        raise type(exc)(f"{where}: {exc.problem}", exc.fix) from None


def _settable(where: str, options: Mapping[str, Any]) -> Mapping[str, Any]:
    for key in options:
        if key.replace("-", "_") in SET_BY_APPLY:
            raise BadOptionsError(f"{where}.{key}: is set by apply from the model's fields", f"remove {key}")
    return options


def _fetched_from(entry: ModelEntry) -> dict[str, Any]:
    if entry.source == BOOTSTRAP:
        return {"source": None, "sha256": None, "bootstrap": True}
    return {"source": entry.source, "sha256": entry.sha256, "bootstrap": False}


def model_plan(where: str, entry: ModelEntry) -> ModelPlan:
    """One model's stages with their typed options, each checked against the model's task."""

    options = {stage: entry.options.get(stage, {}) for stage in ("fetch", "export", "convert")}
    fetch = FetchOptions.from_mapping(
        _settable(f"{where}.fetch", options["fetch"]), f"{where}.fetch", fixed=_fetched_from(entry)
    )
    export = ExportOptions.from_mapping(_settable(f"{where}.export", options["export"]), f"{where}.export")
    convert = ConvertOptions.from_mapping(_settable(f"{where}.convert", options["convert"]), f"{where}.convert")
    task = get_task(entry.task)
    _checked(f"{where}.export", lambda: recorded_decoding(task, export.ner_decoding))
    _checked(f"{where}.convert", lambda: convert.check(task, entry.name))
    return ModelPlan(where, entry, fetch, export, convert)


def build_plan(deployment: Deployment) -> BuildOptions:
    """The build options of the file's `build` section, checked as far as they can be before the models exist."""

    where = f"{deployment.path.name}: build"
    options = build_options_from_mapping(_settable(where, deployment.build), where)
    if options.runtime != AUTO:  # with "auto" the server found when the build runs decides what fits
        _checked(where, lambda: resolve_build_options(options, deployment.repository))
    for m in deployment.models:
        _checked(where, lambda m=m: decides_decoding(ModelSpec.new(m.task, m.name), options.overrides))
    return options


def plan(deployment: Deployment | str | Path, *, keep_others: bool = False) -> Plan:
    """What carrying out the deployment file does, every option checked: nothing has run yet."""

    if not isinstance(deployment, Deployment):
        deployment = load_deployment(deployment)
    models = tuple(model_plan(f"models[{i}]", entry) for i, entry in enumerate(deployment.models))
    build = build_plan(deployment)
    listed = {m.name for m in deployment.models}
    # every model the repository serves, made or not: an entry never made that the file does not list goes too
    served = set(Existing.read(Path(deployment.repository)).served())
    stale = () if keep_others else tuple(sorted(served - listed))
    datasets = tuple(sorted({get_task(m.task).dataset for m in deployment.models}))
    return Plan(deployment, datasets, models, build, stale)


def _shown(options, defaults: Mapping[str, Any] | None = None) -> str:
    """The options that differ from the defaults, as `name=value`."""
    values = changed(options, defaults)
    return " ".join(f"{k}={v}" for k, v in values.items()) or "(defaults)"


def _prepare(datasets: tuple[str, ...], log: Log) -> None:

    for name in datasets:
        log(f"{name}: {prepare(name)}")


def _build(plan: Plan, log: Log) -> None:
    built = build_models(plan.names, plan.build, plan.deployment.repository, log=log)
    log(f"model step runtime: {built.options.runtime}")


def steps(plan: Plan, log: Log) -> list[Step]:
    """The plan as the steps that carry it out, in order, each with the line that shows it."""

    file, repository = plan.deployment.path.name, plan.deployment.repository
    data = f"data: {', '.join(plan.datasets)} (convert's parity check reads the test split)"
    out = [Step(f"{file}: data", data, partial(_prepare, plan.datasets, log))]
    for m in plan.models:
        name, task = m.entry.name, m.entry.task
        where, head = f"{file}: {m.where} ({name})", f"{name} ({task})"
        out += [
            Step(
                f"{where}: fetch",
                f"{head}: fetch {_shown(m.fetch)}",
                partial(fetch_model, task, name, m.fetch, log=log),
            ),
            Step(
                f"{where}: export",
                f"{head}: export {_shown(m.export)}",
                partial(export_model, task, name, m.export, log=log),
            ),
            Step(
                f"{where}: convert",
                f"{head}: convert {_shown(m.convert)}",
                partial(convert_model, name, m.convert, log=log),
            ),
        ]
    out.append(
        Step(
            f"{file}: build",
            f"build {', '.join(plan.names)} into {repository}: {_shown(plan.build)}",
            partial(_build, plan, log),
        )
    )
    if plan.stale:
        out.append(
            Step(
                f"{file}: remove",
                f"remove {', '.join(plan.stale)}: no longer listed in {file}",
                partial(remove, repository, list(plan.stale)),
                "the listed models are built; the others are still served",
            )
        )
    return out


def deploy(
    deployment: Deployment | str | Path, *, keep_others: bool = False, dry_run: bool = False, log: Log = print
) -> Plan:
    """Carry out a deployment file (or just show how, with `dry_run`): each step's line, then its work. A step that
    fails stops the run, named with its place in the file; a stage before the build leaves the repository as it
    was."""
    planned = plan(deployment, keep_others=keep_others)
    for step in steps(planned, log):
        log(f"==> {step.title}")
        if dry_run:
            continue
        try:
            step.action()
        except ErnieDeployError as exc:  # of its own type still: a caller tells a parity failure from a bad file
            raise type(exc)(
                f"{step.where}: {exc.problem}",
                (f"{exc.fix}; then " if exc.fix else "fix what it names and ")
                + f"run apply again ({step.after_failure})",
            ) from None
    return planned
