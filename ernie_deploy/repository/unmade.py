"""Entries of a repository whose files were never made: a config.pbtxt (and a generated model.py) with none of the
files `build` writes beside them. The committed demo repository is such a folder until the quickstart or
`scripts/convert.sh` makes its models: in a checkout where only a user's own model was converted, the demo entries
hold configs alone.

Triton cannot load such an entry, and with --exit-on-error (server.args) one entry that fails stops the whole
server. So the project's launcher loads the other models and names these with the command that makes them
(`served.load_plan`), the tools that read the served models leave them out (`Existing.made`), and `ernie-deploy check`
lists them. An entry that holds some of its files but not all is not unmade but broken: `check` reports it as a
problem, and it still stops the server, as any model that fails to load does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from ernie_deploy.core.tasks import DEMO_MODELS, TASK_PARAMETER

# The files `build` writes into a version folder that a config names: python steps name theirs in parameters ending
# in _file (model_file, tokenizer_file, labels_file, thresholds_file); an onnxruntime model step reads its
# default_model_filename, model.onnx unless set.
FILE_SUFFIX = "_file"
ORT_DEFAULT_FILE = "model.onnx"


def files_named(config: mc.ModelConfig) -> set[str]:
    """The files a config says its version folders hold (besides a python model's model.py)."""
    names = {p.string_value for key, p in config.parameters.items() if key.endswith(FILE_SUFFIX) and p.string_value}
    if config.platform.startswith("onnxruntime") or config.backend == "onnxruntime":
        names.add(config.default_model_filename or ORT_DEFAULT_FILE)
    return names


def entry_unmade(model_dir: Path, config: mc.ModelConfig) -> bool:
    """True when the entry's config names files and none of them is in any of its version folders."""
    names = files_named(config)
    if not names:
        return False  # an ensemble: it is as made as its steps are
    versions = [p for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit()] if model_dir.is_dir() else []
    return not any((version / name).exists() for version in versions for name in names)


@dataclass(frozen=True)
class Unmade:
    """A model users would call whose entries were never made."""

    name: str
    entries: tuple[str, ...]  # its entries without files: itself (fused) or its steps
    task: str | None  # the task its config records

    def command(self, repository: str | Path) -> str:
        """The command that makes it: the convert of its task, under its name where it is not the task's demo model."""
        task = self.task or "TASK"
        where = "" if Path(repository) == Path("models") else f" --repository {repository}"
        if DEMO_MODELS.get(task) == self.name:
            return f"scripts/convert.sh --task {task}{where}"
        return f"scripts/convert.sh --task {task} --model {self.name} --source DIR{where}"

    def note(self, repository: str | Path) -> str:
        """One line that names it, what it lacks and the command that makes it."""
        lacking = ", ".join(self.entries)
        return (
            f"{self.name}: never made (no files in {lacking}: only its config is there), so it is not served; "
            f"make it with `{self.command(repository)}`"
        )


def unmade_entries(configs: dict[str, mc.ModelConfig], repository: str | Path) -> list[str]:
    """Every entry that was never made, by name."""
    return sorted(name for name, config in configs.items() if entry_unmade(Path(repository) / name, config))


def unmade_models(
    configs: dict[str, mc.ModelConfig], repository: str | Path, empty: set[str] | None = None
) -> list[Unmade]:
    """The models users would call (entries recording a task) with an entry that was never made, by name. `empty`:
    the unmade entries where the caller has found them already."""
    empty = set(unmade_entries(configs, repository)) if empty is None else empty
    found = []
    for name, config in sorted(configs.items()):
        if TASK_PARAMETER not in config.parameters:
            continue
        members = [name, *(step.model_name for step in config.ensemble_scheduling.step)]
        lacking = tuple(m for m in members if m in empty)
        if lacking:
            found.append(Unmade(name, lacking, config.parameters[TASK_PARAMETER].string_value or None))
    return found
