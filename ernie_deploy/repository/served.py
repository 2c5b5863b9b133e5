"""What a repository serves, read from its configs: the models users call, each with its task, layout, record
(core.spec), steps and request limits. Tools that see only a repository (check, stats, rollout, soak, apply) read it
here; `build` reads it to know what it may share and must leave alone."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from ernie_deploy.core.errors import BadRepositoryError
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.core.tasks import TASK_PARAMETER, WINDOW_OUTPUTS
from ernie_deploy.repository.configs import parse
from ernie_deploy.repository.layouts import Layout, entry_record, layout_of
from ernie_deploy.repository.unmade import Unmade, unmade_entries, unmade_models
from ernie_deploy.serving.limits import ReadingLimits, TextLimits
from ernie_deploy.serving.parameters import CUT_MAX_TEXT_CHARS, WINDOW_MAX_REQUEST_CHARS, WINDOW_MAX_TEXT_CHARS

# The config parameter holding a tokenizer model's fingerprint: a digest of its config and tokenizer.json, so that a
# later build finds the tokenizer it can share without comparing files (repository/tokenizers.py). The key is what
# the tokenizer configs of every built repository carry, so it is read under that name.
TOKENIZER_FINGERPRINT_PARAMETER = "settings_sha256"
# The version folder `build` writes each Triton model into. A shared tokenizer step is never versioned (a new version
# of a model keeps its tokenizer: repository/add_version.py), so its files stay here.
FIRST_VERSION = "1"


@dataclass
class Existing:
    """What a repository already holds: its models' configs, and which models each ensemble uses."""

    configs: dict[str, mc.ModelConfig]
    repository: Path | None = None

    @classmethod
    def read(cls, repository: Path) -> Existing:
        configs = {}
        for path in sorted(Path(repository).glob("*/config.pbtxt")):
            try:
                configs[path.parent.name] = parse(path.read_text(encoding="utf-8"))
            except Exception:  # not ours to judge here: `ernie-deploy check` reports unreadable configs
                continue
        return cls(configs, Path(repository))

    def members(self, name: str) -> set[str]:
        """The models that make up served model `name`: itself and, for an ensemble, its steps."""
        config = self.configs.get(name)
        if config is None:
            return set()
        return {name} | {step.model_name for step in config.ensemble_scheduling.step}

    def tokenizers(self) -> dict[str, str]:
        """fingerprint -> name of each tokenizer model that records one."""
        return {
            config.parameters[TOKENIZER_FINGERPRINT_PARAMETER].string_value: name
            for name, config in self.configs.items()
            if TOKENIZER_FINGERPRINT_PARAMETER in config.parameters
        }

    def steps(self, name: str) -> list[str]:
        """The models a request to served model `name` runs through: an ensemble's steps in order, or itself."""
        return [step.model_name for step in self.configs[name].ensemble_scheduling.step] or [name]

    def served(self) -> list[str]:
        """Names of the models users call: the entries that name their task (ensembles and fused models)."""
        return [name for name, config in self.configs.items() if TASK_PARAMETER in config.parameters]

    def made(self) -> list[str]:
        """The models users call whose files were made: `served()` less the entries that hold a config alone
        (repository.unmade), which no server loads. What the tools that read a served model list."""
        unmade = {u.name for u in unmade_models(self.configs, self.repository or Path("."))}
        return [name for name in self.served() if name not in unmade]


def served_models(repository: str | Path) -> dict[str, ModelSpec]:
    """The models users can call in `repository`, by name, each with the record `build` left on it (core.spec). A
    model without one (built by an older version) is refused with the command that rebuilds it; one whose files were
    never made (repository.unmade) is left out."""
    existing = Existing.read(Path(repository))
    return {name: entry_record(name, existing.configs[name]) for name in sorted(existing.made())}


def served_layouts(repository: str | Path) -> dict[str, Layout]:
    """The models users can call in `repository`, each with its layout."""
    existing = Existing.read(Path(repository))
    return {name: layout_of(name, existing.configs) for name in sorted(existing.made())}


def served_steps(repository: str | Path) -> dict[str, list[str]]:
    """The models users can call in `repository`, each with the models its requests run through, in order (an
    ensemble's steps, or a fused model alone)."""
    existing = Existing.read(Path(repository))
    return {name: existing.steps(name) for name in sorted(existing.made())}


def served_limits(repository: str | Path) -> dict[str, tuple[str, TextLimits]]:
    """The models users can call in `repository`, each with the step that tokenizes its texts and the request limits
    that step holds it to (serving.limits: those of the reading it asks for, windows or the cut text)."""
    existing = Existing.read(Path(repository))
    out = {}
    for name in sorted(existing.made()):
        served = existing.configs[name]
        asked = {key for step in served.ensemble_scheduling.step for key in step.output_map}
        for step in existing.steps(name):
            parameters = existing.configs[step].parameters
            if "tokenizer_file" in parameters:

                def read(key, parameters=parameters):
                    return parameters[key].string_value if key in parameters else None

                if read(CUT_MAX_TEXT_CHARS.name) is None and read(WINDOW_MAX_TEXT_CHARS.name) is not None:
                    # An extraction model's own step reads every text whole, in windows: it holds their limits alone.
                    limits = [p.parse(read(p.name), name) for p in (WINDOW_MAX_TEXT_CHARS, WINDOW_MAX_REQUEST_CHARS)]
                    out[name] = (step, TextLimits(*limits))
                    break
                # an ensemble asks its tokenizer for the window tensors; a fused model reads them itself
                windows = bool(asked & set(WINDOW_OUTPUTS)) or read("long_text") == "window"
                out[name] = (step, ReadingLimits.from_parameters(read).reading(windows))
                break
    return out


def served_model(repository: str | Path, name: str) -> ModelSpec:
    """The record of served model `name`, or a clear refusal naming the models there are."""
    models = served_models(repository)
    if name not in models:
        raise BadRepositoryError(
            f"{repository} serves no model {name!r}",
            f"use one of: {', '.join(models) or '(none: build one first)'}",
        )
    return models[name]


@dataclass(frozen=True)
class LoadPlan:
    """What a server started on a repository loads: None for every entry (none is unmade), else the entries to load
    by name; the models left out, each with the command that makes it; and the entries never made that no model
    uses (a leftover config)."""

    load: tuple[str, ...] | None
    skipped: tuple[Unmade, ...]
    orphans: tuple[str, ...] = ()


def load_plan(repository: str | Path) -> LoadPlan:
    """The entries to load: every one but those never made and the models that use them."""
    existing = Existing.read(Path(repository))
    empty = set(unmade_entries(existing.configs, repository))
    unmade = unmade_models(existing.configs, repository, empty)
    if not empty:
        return LoadPlan(None, ())
    left_out = empty | {u.name for u in unmade}
    used = {e for u in unmade for e in u.entries}
    # An entry a made model still uses (a shared tokenizer) loads with it: Triton loads an ensemble's steps itself.
    load = tuple(name for name in sorted(existing.configs) if name not in left_out)
    return LoadPlan(load, tuple(unmade), tuple(sorted(empty - used)))
