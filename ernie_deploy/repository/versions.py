"""Versions of a named model: which one is serving, which are on disk, and the config edits that move between them.

A model `<name>` keeps its versions in the version folders of its own steps (`<name>_model/<N>/model.onnx`,
`<name>_postprocess/<N>/labels.json`). What serves is written in the configs, so a restarted server serves the same:
the ensemble pins its steps to one version (`model_version: N`), and each step loads exactly the versions in its
`version_policy { specific { versions: [...] } }`. A version keeps the model's tokenizer and tensor signature; a
model whose vocabulary or labels change is a new model, under another name.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.files import atomic_path
from ernie_deploy.repository.configs import parse, render

CANARY_SUFFIX = "_canary"


@dataclass(frozen=True)
class VersionedModel:
    """One served model's configs in a repository: the ensemble and the two steps that carry versions."""

    repository: Path
    name: str
    ensemble: mc.ModelConfig
    steps: dict[str, mc.ModelConfig]  # <name>_model, <name>_postprocess

    @classmethod
    def read(cls, repository: str | Path, name: str) -> VersionedModel:
        repository = Path(repository)
        path = repository / name / "config.pbtxt"
        if not path.exists():
            raise ErnieDeployError(f"{repository} has no model {name!r}", "check the name, or build it first")
        ensemble = parse(path.read_text(encoding="utf-8"))
        if ensemble.platform != "ensemble":
            raise ErnieDeployError(
                f"{name!r} is a fused model: its versions cannot be switched step by step",
                "build it without --fused to give it versions",
            )
        steps = {}
        for step_name in (f"{name}_model", f"{name}_postprocess"):
            step_path = repository / step_name / "config.pbtxt"
            if not step_path.exists():
                raise ErnieDeployError(f"{repository} has no {step_name} for model {name!r}", "rebuild the model")
            steps[step_name] = parse(step_path.read_text(encoding="utf-8"))
        return cls(repository, name, ensemble, steps)

    @property
    def canary(self) -> str:
        return f"{self.name}{CANARY_SUFFIX}"

    def on_disk(self) -> list[int]:
        """Versions whose files are complete in every versioned step."""
        found = None
        for step in self.steps:
            numbers = {int(p.name) for p in (self.repository / step).iterdir() if p.is_dir() and p.name.isdigit()}
            numbers = {n for n in numbers if any((self.repository / step / str(n)).iterdir())}
            found = numbers if found is None else found & numbers
        return sorted(found or ())

    def serving(self) -> int:
        """The version the ensemble answers with: its pin, or the newest on disk where it pins none (-1)."""
        pins = {s.model_version for s in self.ensemble.ensemble_scheduling.step if s.model_name in self.steps}
        if len(pins) != 1:
            raise ErnieDeployError(f"{self.name}: its steps are pinned to different versions {sorted(pins)}")
        pin = pins.pop()
        if pin > 0:
            return pin
        versions = self.on_disk()
        if not versions:
            raise ErnieDeployError(f"{self.name} has no version on disk", "rebuild it")
        return versions[-1]

    def pinned(self, version: int, name: str | None = None) -> mc.ModelConfig:
        """The ensemble's config with its versioned steps pinned to `version` (under `name`, e.g. the canary's)."""
        config = mc.ModelConfig()
        config.CopyFrom(self.ensemble)
        config.name = name or self.name
        for step in config.ensemble_scheduling.step:
            if step.model_name in self.steps:
                step.model_version = version
        return config

    def with_versions(self, step: str, versions: list[int]) -> mc.ModelConfig:
        """A step's config that loads exactly `versions`."""
        config = mc.ModelConfig()
        config.CopyFrom(self.steps[step])
        config.version_policy.specific.versions[:] = sorted(set(versions))
        return config

    def write(self, config: mc.ModelConfig) -> Path:
        """Write a config into its model folder atomically (an ensemble also gets its empty version folder)."""
        folder = self.repository / config.name
        (folder / "1" if config.platform == "ensemble" else folder).mkdir(parents=True, exist_ok=True)
        path = folder / "config.pbtxt"
        with atomic_path(path) as tmp:
            tmp.write_text(render(config), encoding="utf-8")
        return path


def without_versions(config: mc.ModelConfig) -> mc.ModelConfig:
    """A step's config minus what differs between versions of one model (for comparing signatures)."""
    copy = mc.ModelConfig()
    copy.CopyFrom(config)
    copy.ClearField("version_policy")
    return copy
