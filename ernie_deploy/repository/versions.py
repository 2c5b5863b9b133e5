"""Versions of a named model: which one is serving, which are on disk, and the config edits that move between them.

A model keeps its versions in the version folders of the Triton models its layout versions (`Layout.versioned`:
`<name>_model/<N>/` and `<name>_postprocess/<N>/` for the ensemble, `<name>_model/<N>/` alone where the postprocess is
in the graph, `<name>/<N>/` for a fused model). What serves is written in the configs, so a restarted server serves
the same: an ensemble pins its versioned steps to one version (`model_version: N`) and each step loads exactly the
versions in its `version_policy { specific { versions: [...] } }`; a fused model loads exactly the version its own
policy names. A version keeps the model's tokenizer and tensor signature; a model whose vocabulary or labels change is
a new model, under another name.

A version is its record (`<name>/<N>/model.json`, core.spec): every config that moves to a version is rendered from
that record as `build` renders it (repository/version_configs.py), its serving settings with it.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from ernie_deploy.core.errors import BadRepositoryError
from ernie_deploy.core.files import atomic_path
from ernie_deploy.core.spec import SPEC_FILE, SPEC_PARAMETER, ModelSpec
from ernie_deploy.repository.configs import parse, render
from ernie_deploy.repository.layouts import Layout, caches_answers, entry_record, layout_of
from ernie_deploy.repository.version_configs import version_configs

CANARY_SUFFIX = "_canary"
# The config fields and model parameters a version's own settings (core.settings.VersionSettings) are rendered into:
# instances, batch size, the batcher's queue, onnxruntime's threads and spinning (the python model step's names and
# the ORT backend's). Two versions' configs that differ in nothing else fit one model (repository.add_version).
SETTING_FIELDS = ("max_batch_size", "instance_group", "dynamic_batching")
SETTING_PARAMETERS = frozenset(
    {"intra_op_threads", "ort_spinning", "intra_op_thread_count", "inter_op_thread_count", "execution_mode"}
)
# Where an older ernie-deploy kept a version's settings beside its record. Nothing reads it: a repository holding one
# is refused by name, since its versions' records may not say what the file said (VersionedModel.read).
STALE_SETTINGS_FILE = "settings.pbtxt"


def _read(repository: Path, name: str) -> mc.ModelConfig:
    return parse((repository / name / "config.pbtxt").read_text(encoding="utf-8"))


@dataclass(frozen=True)
class VersionedModel:
    """One served model's configs in a repository: its entry (the model users call) and the Triton models that carry
    its versions (for a fused model, the entry itself)."""

    repository: Path
    name: str
    layout: Layout
    entry: mc.ModelConfig
    steps: dict[str, mc.ModelConfig]
    # version -> its configs as rendered from its record (version_configs), rendered once per version
    _rendered: dict[int, dict[str, mc.ModelConfig]] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def read(cls, repository: str | Path, name: str) -> VersionedModel:
        repository = Path(repository)
        if not (repository / name / "config.pbtxt").exists():
            raise BadRepositoryError(f"{repository} has no model {name!r}", "check the name, or build it first")
        entry = _read(repository, name)
        configs = {name: entry}
        for step in entry.ensemble_scheduling.step:
            if (repository / step.model_name / "config.pbtxt").exists():
                configs[step.model_name] = _read(repository, step.model_name)
        model = entry_record(name, entry)
        if model is None:
            raise BadRepositoryError(f"{name!r} in {repository} is not a model users call", "name a served model")
        _refuse_stale_settings(repository, name)
        layout = layout_of(name, configs)
        steps = {}
        for step_name in layout.versioned(model):
            if step_name not in configs:
                raise BadRepositoryError(f"{repository} has no {step_name} for model {name!r}", "rebuild the model")
            steps[step_name] = configs[step_name]
        return cls(repository, name, layout, entry, steps)

    @property
    def canary(self) -> str:
        return f"{self.name}{CANARY_SUFFIX}"

    @property
    def routed(self) -> bool:
        """Whether the entry is an ensemble that routes to versioned steps (else it holds its versions itself)."""
        return self.entry.platform == "ensemble"

    def on_disk(self) -> list[int]:
        """Versions whose files are complete in every versioned model."""
        found = None
        for step in self.steps:
            numbers = {int(p.name) for p in (self.repository / step).iterdir() if p.is_dir() and p.name.isdigit()}
            numbers = {n for n in numbers if any((self.repository / step / str(n)).iterdir())}
            found = numbers if found is None else found & numbers
        return sorted(found or ())

    def serving_version(self) -> int:
        """The version that answers: the ensemble's pin (a fused model's policy), or the newest on disk where none is
        pinned."""
        if self.routed:
            pins = {s.model_version for s in self.entry.ensemble_scheduling.step if s.model_name in self.steps}
        else:
            pins = set(self.entry.version_policy.specific.versions) or {-1}
        if len(pins) != 1:
            raise BadRepositoryError(
                f"{self.name}: its versioned models are pinned to different versions {sorted(pins)}",
                f"pin them to one version: ernie-deploy rollout --model {self.name} --to N, or rebuild the model",
            )
        pin = pins.pop()
        if pin > 0:
            return pin
        versions = self.on_disk()
        if not versions:
            raise BadRepositoryError(f"{self.name} has no version on disk", "rebuild it")
        return versions[-1]

    def pinned(self, version: int, name: str | None = None) -> mc.ModelConfig:
        """The entry's config answering with `version` (under `name`, e.g. the canary's): rendered from the version's
        record, which it carries, so that what reads a served model's record (check, stats, the gateway, tune, the
        shadow) reads that version's."""
        config = self.rendered(version, self.name)
        config.name = name or self.name
        if self.routed:
            for step in config.ensemble_scheduling.step:
                if step.model_name in self.steps:
                    step.model_version = version
        if not self.routed or caches_answers(config):
            # A caching ensemble is itself version N while it pins version N: Triton keys cached answers by the
            # entry's version (layouts.cache_answers), so no answer of another version can be served from the cache.
            config.version_policy.specific.versions[:] = [version]
        return config

    def record(self, version: int) -> ModelSpec:
        """The record of `version` (core.spec), from its folder in the entry: `<name>/<version>/model.json`."""
        folder = self.repository / self.name / str(version)
        if not (folder / SPEC_FILE).is_file():
            raise BadRepositoryError(
                f"version {version} of {self.name!r} has no record ({folder / SPEC_FILE})",
                f"build the version again: ernie-deploy build --model {self.name} --version {version}",
            )
        return ModelSpec.read(folder)

    def with_versions(self, step: str, versions: list[int], rendered_from: int) -> mc.ModelConfig:
        """A versioned model's config that loads exactly `versions`, rendered from the record of version
        `rendered_from`: its serving settings are that version's."""
        config = self.rendered(rendered_from, step)
        config.version_policy.specific.versions[:] = sorted(set(versions))
        return config

    def rendered(self, version: int, model: str) -> mc.ModelConfig:
        """Triton model `model` (the entry or a versioned model) as `build` renders it from `version`'s record (a
        copy, to edit)."""

        if version not in self._rendered:
            record = self.record(version)
            self._rendered[version] = version_configs(self.repository, self.layout, self.entry, record, version)
        config = mc.ModelConfig()
        config.CopyFrom(self._rendered[version][model])
        return config

    def write(self, config: mc.ModelConfig) -> Path:
        """Write a config into its model folder atomically (an ensemble also gets the empty folders of its versions)."""
        folder = self.repository / config.name
        folder.mkdir(parents=True, exist_ok=True)
        if config.platform == "ensemble":
            for version in config.version_policy.specific.versions or [1]:
                (folder / str(version)).mkdir(exist_ok=True)
        path = folder / "config.pbtxt"
        with atomic_path(path) as tmp:
            tmp.write_text(render(config), encoding="utf-8")
        return path

    def write_canary(self, version: int) -> Path:
        """The canary `<name>_canary`, answering with `version` beside the serving model: a second ensemble over the
        same steps, or, for a model that holds its versions itself, a copy of it holding that version (its files
        hard-linked where the filesystem allows, so a large model is not copied)."""
        folder = self.repository / self.canary
        if not self.routed:
            target = folder / str(version)
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(self.repository / self.name / str(version), target, copy_function=_link_or_copy)
            warmup = self.repository / self.name / "warmup"
            if warmup.is_dir():
                shutil.copytree(warmup, folder / "warmup", dirs_exist_ok=True)
        return self.write(self.pinned(version, self.canary))


def _link_or_copy(src: str, dst: str) -> str:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
    return dst


def without_versions(config: mc.ModelConfig) -> mc.ModelConfig:
    """A config minus what differs between versions of one model (for comparing signatures): the versions it loads,
    and a fused model's record, whose labels and thresholds are the version's own."""
    copy = mc.ModelConfig()
    copy.CopyFrom(config)
    copy.ClearField("version_policy")
    if SPEC_PARAMETER in copy.parameters:
        del copy.parameters[SPEC_PARAMETER]
    return copy


def without_settings(config: mc.ModelConfig) -> mc.ModelConfig:
    """A config minus its serving settings (for comparing what a version must share with its model)."""
    out = mc.ModelConfig()
    out.CopyFrom(config)
    for name in SETTING_FIELDS:
        out.ClearField(name)
    for key in SETTING_PARAMETERS & set(out.parameters):
        del out.parameters[key]
    return out


def _refuse_stale_settings(repository: Path, name: str) -> None:
    stale = sorted((repository / name).glob(f"*/{STALE_SETTINGS_FILE}"))
    if stale:
        raise BadRepositoryError(
            f"{name!r} holds {', '.join(str(p.relative_to(repository)) for p in stale)}, version settings kept apart "
            "from their records by an older ernie-deploy: a version's settings are its record's alone (model.json), "
            "and the record of a version that carried such a file may say other settings than its configs",
            f"rebuild the model: ernie-deploy build --model {name} (then each other version again: --version N)",
        )
