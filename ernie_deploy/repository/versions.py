"""Versions of a named model: which one is serving, which are on disk, and the config edits that move between them.

A model keeps its versions in the version folders of the Triton models its layout versions (`Layout.versioned`:
`<name>_model/<N>/` and `<name>_postprocess/<N>/` for the ensemble, `<name>_model/<N>/` alone where the postprocess is
in the graph, `<name>/<N>/` for a fused model). What serves is written in the configs, so a restarted server serves
the same: an ensemble pins its versioned steps to one version (`model_version: N`) and each step loads exactly the
versions in its `version_policy { specific { versions: [...] } }`; a fused model loads exactly the version its own
policy names. A version keeps the model's tokenizer and tensor signature; a model whose vocabulary or labels change is
a new model, under another name.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from ernie_deploy.core.errors import BadRepositoryError
from ernie_deploy.core.files import atomic_path
from ernie_deploy.core.spec import SPEC_FILE, SPEC_PARAMETER, ModelSpec
from ernie_deploy.repository.configs import parse, render
from ernie_deploy.repository.layouts import Layout, caches_answers, entry_record, layout_of

CANARY_SUFFIX = "_canary"
# A version may carry its own serving settings (`ernie-deploy tune` writes its winner so): how many instances, how
# requests are batched and queued, how onnxruntime runs. They change speed, never answers, so they may differ between
# versions of one model; the file in the entry's version folder holds them per Triton model, and rollout applies them
# with the version. A version without the file keeps the settings the model has.
SETTINGS_FILE = "settings.pbtxt"
SETTING_FIELDS = ("max_batch_size", "instance_group", "dynamic_batching")
# model parameters that are settings: the python model step's and the ORT backend's thread and spinning options
SETTING_PARAMETERS = frozenset(
    {"intra_op_threads", "ort_spinning", "intra_op_thread_count", "inter_op_thread_count", "execution_mode"}
)


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
        """The entry's config answering with `version` (under `name`, e.g. the canary's)."""
        config = mc.ModelConfig()
        config.CopyFrom(self.entry)
        config.name = name or self.name
        if self.routed:
            for step in config.ensemble_scheduling.step:
                if step.model_name in self.steps:
                    step.model_version = version
        if not self.routed or caches_answers(config):
            # A caching ensemble is itself version N while it pins version N: Triton keys cached answers by the
            # entry's version (layouts.cache_answers), so no answer of another version can be served from the cache.
            config.version_policy.specific.versions[:] = [version]
        # The entry carries the record of the version it serves, so that what reads a served model's record (check,
        # stats, the gateway, tune, the shadow) reads that version's.
        config.parameters[SPEC_PARAMETER].string_value = self.record(version).to_json()
        return self._set(config, self.name, version)

    def record(self, version: int) -> ModelSpec:
        """The record of `version` (core.spec), from its folder in the entry: `<name>/<version>/model.json`."""
        folder = self.repository / self.name / str(version)
        if not (folder / SPEC_FILE).is_file():
            raise BadRepositoryError(
                f"version {version} of {self.name!r} has no record ({folder / SPEC_FILE})",
                f"build the version again: ernie-deploy build --model {self.name} --version {version}",
            )
        return ModelSpec.read(folder)

    def with_versions(self, step: str, versions: list[int], settings_of: int | None = None) -> mc.ModelConfig:
        """A versioned model's config that loads exactly `versions`, with the serving settings of version
        `settings_of` where it carries its own."""
        config = mc.ModelConfig()
        config.CopyFrom(self.steps[step])
        config.version_policy.specific.versions[:] = sorted(set(versions))
        return self._set(config, step, settings_of)

    # Serving settings carried by a version ---------------------------------------------------------------------
    def settings(self, version: int) -> dict[str, mc.ModelConfig] | None:
        """Triton model -> the settings `version` carries (SETTING_FIELDS and SETTING_PARAMETERS of a config), or None
        for a version that carries none."""
        path = self.repository / self.name / str(version) / SETTINGS_FILE
        if not path.is_file():
            return None
        return read_settings(path)

    def current_settings(self) -> dict[str, mc.ModelConfig]:
        """The settings the model's configs have now: the entry's and each versioned model's."""
        return {name: settings_of(config) for name, config in {self.name: self.entry, **self.steps}.items()}

    def keep_settings(self, version: int) -> None:
        """Record the settings the model has now as `version`'s own, where it has none yet: moving to a version with
        other settings and back then restores these."""
        folder = self.repository / self.name / str(version)
        if folder.is_dir() and not (folder / SETTINGS_FILE).exists():
            write_settings(self.current_settings(), folder / SETTINGS_FILE)

    def _set(self, config: mc.ModelConfig, model: str, version: int | None) -> mc.ModelConfig:
        settings = self.settings(version) if version is not None else None
        if settings and model in settings:
            return with_settings(config, settings[model])
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


def settings_of(config: mc.ModelConfig) -> mc.ModelConfig:
    """The serving settings of a config: SETTING_FIELDS and SETTING_PARAMETERS, nothing else."""
    out = mc.ModelConfig(max_batch_size=config.max_batch_size)
    _copy_settings(config, out)
    return out


def with_settings(config: mc.ModelConfig, settings: mc.ModelConfig) -> mc.ModelConfig:
    """`config` with its serving settings replaced by `settings` (settings_of's shape). An ensemble takes only the
    max batch size: it has no instances and no batcher of its own."""
    out = without_settings(config)
    out.max_batch_size = settings.max_batch_size
    if out.platform != "ensemble":
        _copy_settings(settings, out)
    return out


def _copy_settings(source: mc.ModelConfig, target: mc.ModelConfig) -> None:
    target.instance_group.extend(source.instance_group)
    if source.HasField("dynamic_batching"):
        target.dynamic_batching.CopyFrom(source.dynamic_batching)
    for key, value in source.parameters.items():
        if key in SETTING_PARAMETERS:
            target.parameters[key].CopyFrom(value)


def without_settings(config: mc.ModelConfig) -> mc.ModelConfig:
    """A config minus its serving settings (for comparing what a version must share with its model)."""
    out = mc.ModelConfig()
    out.CopyFrom(config)
    for name in SETTING_FIELDS:
        out.ClearField(name)
    for key in SETTING_PARAMETERS & set(out.parameters):
        del out.parameters[key]
    return out


def read_settings(path: Path) -> dict[str, mc.ModelConfig]:
    """A settings file: one `ModelConfig` text per Triton model, each holding only settings (its `name` says whose)."""
    text = path.read_text(encoding="utf-8")
    settings = {}
    for block in text.split("\n---\n"):
        if block.strip():
            try:
                config = text_format.Parse(block, mc.ModelConfig())
            except text_format.ParseError as exc:
                raise BadRepositoryError(
                    f"{path} is not a settings file ({exc})",
                    "restore it, or delete it to let that version keep the model's settings",
                ) from None
            settings[config.name] = config
    return settings


def write_settings(settings: dict[str, mc.ModelConfig], path: Path) -> None:
    blocks = []
    for name, config in sorted(settings.items()):
        named = mc.ModelConfig()
        named.CopyFrom(config)
        named.name = name
        blocks.append(text_format.MessageToString(named))
    with atomic_path(path) as tmp:
        tmp.write_text("\n---\n".join(blocks), encoding="utf-8")
