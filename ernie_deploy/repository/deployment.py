"""The deployment file: the models one repository serves, where each comes from, and the options of each stage.

    # deploy.yaml
    repository: models            # default: models
    build:                        # build options for the whole repository (optional): `build` flags, no dashes
      runtime: auto
    models:
      - name: news                # the ensemble clients call
        task: seq_cls
        source: https://example.org/news-ernie.tar.gz
        sha256: 3f5a...           # required for a URL: the archive is verified before use
      - name: people
        task: token_cls
        source: bootstrap         # or a local folder / archive
        fetch: {budget: 5}        # per-stage options: the fields the `fetch|export|convert` flags fill
        export: {ner_decoding: argmax}   # a token model's decoding, recorded with it: PaddleNLP's own argmax
        convert: {quantize: int8}

`ernie-deploy apply deploy.yaml` runs each model through fetch, export and convert, then builds the repository
so that it holds exactly these models (ernie_deploy.pipeline.deploy). Every field is checked before any work starts;
a bad one is named with its place in the file (`models[1].sha256`) and the fix. This module checks the file's shape;
the stage options are checked against their typed options (pipeline.options) by the pipeline.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ernie_deploy.core.errors import BadOptionsError, ErnieDeployError
from ernie_deploy.core.tasks import TASKS, check_model_name

STAGES = ("fetch", "export", "convert")  # per-model options; build options apply to the whole repository
BOOTSTRAP = "bootstrap"
_SHA256 = re.compile(r"[0-9a-f]{64}")
_TOP = {"repository", "build", "models"}
_MODEL = {"name", "task", "source", "sha256", *STAGES}


@dataclass(frozen=True)
class ModelEntry:
    name: str
    task: str
    source: str  # a URL, a local path (relative to the file), or "bootstrap"
    sha256: str | None = None
    options: dict[str, dict[str, Any]] = field(default_factory=dict)  # stage -> {option: value}

    @property
    def is_url(self) -> bool:
        return self.source.startswith(("http://", "https://"))


@dataclass(frozen=True)
class Deployment:
    path: Path
    repository: Path
    build: dict[str, Any]
    models: list[ModelEntry]


def _fail(where: str, problem: str, fix: str) -> BadOptionsError:
    return BadOptionsError(f"{where}: {problem}", fix)


def _options(where: str, value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise _fail(where, f"must be a mapping of option names to values, got {value!r}", "write e.g. {budget: 5}")
    for key, item in value.items():
        if isinstance(item, dict | list):
            raise _fail(f"{where}.{key}", f"must be a single value, got {item!r}", "give a number, text or true")
    return dict(value)


def _entry(where: str, raw: Any, base: Path) -> ModelEntry:
    if not isinstance(raw, dict):
        raise _fail(where, f"must be a mapping with name, task and source, got {raw!r}", "see the file format above")
    unknown = sorted(set(raw) - _MODEL)
    if unknown:
        raise _fail(f"{where}.{unknown[0]}", "is not a field of a model", f"use only: {', '.join(sorted(_MODEL))}")
    for key in ("name", "task", "source"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise _fail(f"{where}.{key}", "is missing or empty", f"give the model's {key} as text")
    try:
        name = check_model_name(raw["name"])
    except ErnieDeployError as exc:
        raise _fail(f"{where}.name", exc.problem, exc.fix) from None
    if raw["task"] not in TASKS:
        raise _fail(f"{where}.task", f"{raw['task']!r} is not a task", f"use one of: {', '.join(sorted(TASKS))}")
    source = raw["source"]
    sha256 = raw.get("sha256")
    if sha256 is not None and (not isinstance(sha256, str) or not _SHA256.fullmatch(sha256.lower())):
        raise _fail(f"{where}.sha256", f"{sha256!r} is not a sha256", "give the 64 hex digits `sha256sum FILE` prints")
    entry = ModelEntry(
        name,
        raw["task"],
        source if source == BOOTSTRAP or source.startswith(("http://", "https://")) else str(base / source),
        sha256.lower() if sha256 else None,
        {stage: _options(f"{where}.{stage}", raw.get(stage)) for stage in STAGES if raw.get(stage) is not None},
    )
    if entry.is_url and not entry.sha256:
        raise _fail(
            f"{where}.sha256", "is required for a URL source", "add the archive's sha256, from `sha256sum FILE`"
        )
    if entry.source == BOOTSTRAP and entry.sha256:
        raise _fail(f"{where}.sha256", "means nothing for the bootstrap source", "remove it, or give a URL source")
    return entry


def load_deployment(path: str | Path) -> Deployment:
    """Read and check a deployment file (YAML). Paths in it are relative to the file's folder."""
    import yaml

    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BadOptionsError(f"no deployment file at {path}", "pass the path of your deploy.yaml") from None
    except yaml.YAMLError as exc:
        raise BadOptionsError(f"{path} is not valid YAML: {exc}", "fix the line it names") from None
    where = path.name
    if not isinstance(raw, dict):
        raise _fail(where, "must be a mapping with a `models` list", "see `ernie-deploy apply --help`")
    unknown = sorted(set(raw) - _TOP)
    if unknown:
        raise _fail(f"{where}: {unknown[0]}", "is not a top-level field", f"use only: {', '.join(sorted(_TOP))}")
    models = raw.get("models")
    if not isinstance(models, list) or not models:
        raise _fail(f"{where}: models", "must be a non-empty list of models", "list at least one model")
    base = path.parent.absolute()
    entries = [_entry(f"models[{i}]", item, base) for i, item in enumerate(models)]
    names = [e.name for e in entries]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise _fail(f"models[{i}].name", f"{name!r} is listed twice", "give each model its own name")
    repository = raw.get("repository", "models")
    if not isinstance(repository, str) or not repository:
        raise _fail(f"{where}: repository", f"must be a folder path, got {repository!r}", "e.g. repository: models")
    return Deployment(path, base / repository, _options(f"{where}: build", raw.get("build")), entries)
