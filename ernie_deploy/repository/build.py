"""Assemble a Triton model repository: configs generated from typed protobuf objects and the ONNX signature.

A repository holds any number of named models, of either task. Each model `<name>` is an ensemble of that name
and its steps, `<name>_model` and `<name>_postprocess` (or one fused python model `<name>`); models whose
tokenizers are identical (vocabulary, lowercasing, max_seq_len, build options) share one tokenizer model:
    ernie_tokenizer/              python backend: text -> input_ids, token_type_ids, offsets, lengths, truncated
    ernie_seqcls_model/           the ONNX model: platform onnxruntime_onnx, or python backend running onnxruntime
    ernie_seqcls_postprocess/     python backend: logits -> label_id, label, confidence
    ernie_seqcls/                 ensemble: tokenizer -> model -> postprocess
    ernie_tokencls_model/         the ONNX model, [batch, tokens, labels] logits
    ernie_tokencls_postprocess/   python backend: logits, text, offsets, lengths -> entities (JSON)
    ernie_tokencls/               ensemble: tokenizer -> model -> postprocess; entities and truncated

`build` adds or replaces the models it is given and leaves every other model's files as they were, byte for byte.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.files import atomic_path, staging_dir, write_json
from ernie_deploy.core.tasks import TASK_PARAMETER, TASKS, TOKENIZER_STEP, WINDOW_OUTPUTS, TaskSpec, get_task
from ernie_deploy.repository.configs import parse, render, task_configs, tokenizer_config, warmup_files
from ernie_deploy.repository.options import BuildOptions, long_text_mode
from ernie_deploy.serving.limits import ReadingLimits, TextLimits
from ernie_deploy.serving.multi_label import THRESHOLDS_FILE

VERSION = "1"
# A tokenizer model's fingerprint: a digest of its config and tokenizer.json, so that a later build finds the
# tokenizer it can share without comparing files.
SETTINGS_PARAMETER = "settings_sha256"


@dataclass(frozen=True)
class TaskArtifacts:
    """What `build` needs of one model: its task under the model's name (`task.ensemble`; see TaskSpec.named),
    the converted model, the vocabulary and the label names; for a task with per-label thresholds, the thresholds
    file (default: thresholds.json beside the ONNX model, as `convert` writes it); for a token model, the NER
    decoding its export recorded (StaticModel.ner_decoding; None: the default), which `--ner-decoding` overrides."""

    task: TaskSpec
    onnx: Path
    vocab_file: Path
    labels: list[str]
    thresholds: Path | None = None
    ner_decoding: str | None = None

    def checked_thresholds(self) -> dict[str, float] | None:
        """The model's thresholds, checked against its labels (None: its task has none)."""
        if not self.task.thresholds:
            return None
        from ernie_deploy.serving.multi_label import read_thresholds

        return read_thresholds(self.thresholds or Path(self.onnx).parent / THRESHOLDS_FILE, self.labels)


def _tokenizer_json(vocab_file: Path) -> bytes:
    """The tokenizer.json the tokenizer model of this vocabulary holds."""
    from ernie_deploy.serving.tokenizer import build_tokenizer

    return build_tokenizer(vocab_file).to_str(pretty=True).encode("utf-8")


def _fingerprint(entry: TaskArtifacts, options: BuildOptions, tokenizer_json: bytes) -> str:
    config = render(tokenizer_config("tokenizer", entry.task.max_seq_len, options, entry.task.inputs))
    return hashlib.sha256(config.encode() + b"\0" + tokenizer_json).hexdigest()


@dataclass
class _Existing:
    """What a repository already holds: its models' configs, and which models each ensemble uses."""

    configs: dict[str, mc.ModelConfig]

    @classmethod
    def read(cls, repository: Path) -> _Existing:
        configs = {}
        for path in sorted(repository.glob("*/config.pbtxt")):
            try:
                configs[path.parent.name] = parse(path.read_text(encoding="utf-8"))
            except Exception:  # not ours to judge here: `ernie-deploy check` reports unreadable configs
                continue
        return cls(configs)

    def members(self, name: str) -> set[str]:
        """The models that make up served model `name`: itself and, for an ensemble, its steps."""
        config = self.configs.get(name)
        if config is None:
            return set()
        return {name} | {step.model_name for step in config.ensemble_scheduling.step}

    def tokenizers(self) -> dict[str, str]:
        """fingerprint -> name of each tokenizer model that records one."""
        return {
            config.parameters[SETTINGS_PARAMETER].string_value: name
            for name, config in self.configs.items()
            if SETTINGS_PARAMETER in config.parameters
        }

    def steps(self, name: str) -> list[str]:
        """The models a request to served model `name` runs through: an ensemble's steps in order, or itself."""
        return [step.model_name for step in self.configs[name].ensemble_scheduling.step] or [name]

    def served(self) -> list[str]:
        """Names of the models users call: ensembles, and fused models (python models that name a task)."""
        return [
            name
            for name, config in self.configs.items()
            if config.platform == "ensemble" or TASK_PARAMETER in config.parameters
        ]


def served_models(repository: str | Path) -> dict[str, TaskSpec]:
    """The models users can call in `repository`, by name, each with its task (recorded on the ensemble; a
    repository built before models were named has only the demo ensembles, known by their default names)."""
    existing = _Existing.read(Path(repository))
    defaults = {task.ensemble: task for task in TASKS.values()}
    out = {}
    for name in sorted(existing.served()):
        parameters = existing.configs[name].parameters
        if TASK_PARAMETER in parameters:
            out[name] = get_task(parameters[TASK_PARAMETER].string_value).named(name)
        elif name in defaults:
            out[name] = defaults[name]
    return out


def served_steps(repository: str | Path) -> dict[str, list[str]]:
    """The models users can call in `repository`, each with the models its requests run through: an ensemble's
    steps in order, or a fused model alone."""
    existing = _Existing.read(Path(repository))
    return {name: existing.steps(name) for name in sorted(existing.served())}


def served_limits(repository: str | Path) -> dict[str, tuple[str, TextLimits]]:
    """The models users can call in `repository`, each with the step that tokenizes its texts and the request limits
    that step holds it to (serving.limits: those of the reading it asks for, windows or the cut text; a tokenizer
    built before the limits were recorded enforces the defaults)."""
    existing = _Existing.read(Path(repository))
    out = {}
    for name in sorted(existing.served()):
        served = existing.configs[name]
        asked = {key for step in served.ensemble_scheduling.step for key in step.output_map}
        for step in existing.steps(name):
            parameters = existing.configs[step].parameters
            if "tokenizer_file" in parameters:

                def read(key, parameters=parameters):
                    return parameters[key].string_value if key in parameters else None

                # an ensemble asks its tokenizer for the window tensors; a fused model reads them itself
                windows = bool(asked & set(WINDOW_OUTPUTS)) or read("long_text") == "window"
                out[name] = (step, ReadingLimits.from_parameters(read).reading(windows))
                break
    return out


def tokenizer_steps(
    entries: list[TaskArtifacts], options: BuildOptions = BuildOptions(), existing: _Existing | None = None
) -> dict[str, tuple[str, str, bytes]]:
    """model name -> (tokenizer step name, fingerprint, tokenizer.json). Models whose tokenizer models would be
    identical share one (real ERNIE 3.0 checkpoints of one size share a vocabulary). A tokenizer the repository
    already has keeps its name; a new one is `ernie_tokenizer` while that name is free, else
    `ernie_tokenizer_<fingerprint>`."""
    existing = existing or _Existing({})
    replaced = {e.task.ensemble for e in entries}
    kept = set().union(*(existing.members(m) for m in existing.served() if m not in replaced))
    known = {fp: name for fp, name in existing.tokenizers().items() if name in kept}
    taken = set(existing.configs) - set().union(*(existing.members(m) for m in replaced)) | kept
    out = {}
    for entry in sorted(entries, key=lambda e: e.task.ensemble):
        payload = _tokenizer_json(entry.vocab_file)
        fingerprint = _fingerprint(entry, options, payload)
        if fingerprint not in known:
            name = TOKENIZER_STEP if TOKENIZER_STEP not in taken else f"{TOKENIZER_STEP}_{fingerprint[:8]}"
            known[fingerprint] = name
            taken.add(name)
        out[entry.task.ensemble] = (known[fingerprint], fingerprint, payload)
    return out


def pad_token_id(vocab_file: str | Path) -> int:
    """The id the tokenizer pads with, which the python model step must pad with too."""
    from ernie_deploy.serving.tokenizer import PAD, read_vocab

    return read_vocab(vocab_file)[PAD]


MODEL_PY = '''"""Triton python model `{name}`, generated by `ernie-deploy build`.

It runs the `{step}` step of ernie_deploy.serving.steps.
"""

from ernie_deploy.serving.triton_model import StepModel


class TritonPythonModel(StepModel):
    step = "{step}"
'''


def _python_step(config: mc.ModelConfig, task: TaskSpec) -> str | None:
    if config.backend != "python":
        return None
    if config.name == task.ensemble:
        return "pipeline"
    if config.name == task.model_step:
        # build --tokenizer-in-model: the model step reads the text and tokenizes it itself
        return "tokenizer_onnx" if "tokenizer_file" in config.parameters else "onnx"
    if config.name == task.postprocess_step:
        return task.postprocess
    return "tokenizer"


def write_text(path: Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def build(
    entries: list[TaskArtifacts] | TaskArtifacts, repository: str | Path, options: BuildOptions = BuildOptions()
) -> list[Path]:
    """Add or replace the given models in `repository`; returns the configs written.

    Every model is generated whole in a staging folder next to the repository and only then moved in, one
    folder rename per model: an interrupted or failed build leaves the previous models as they were, and
    no model folder ever mixes files of two builds. Other models in the repository are left alone, byte for
    byte; a model's former steps that the new build no longer uses (and a tokenizer no model uses any more)
    are removed with it."""
    entries = [entries] if isinstance(entries, TaskArtifacts) else list(entries)
    names = [e.task.ensemble for e in entries]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ErnieDeployError(f"model {', '.join(twice)} is listed twice", "give each model its own --name")
    thresholds = {e.task.ensemble: e.checked_thresholds() for e in entries}  # a bad file fails before any write
    repository = Path(repository).absolute()
    repository.mkdir(parents=True, exist_ok=True)
    existing = _Existing.read(repository)
    tokenizers = tokenizer_steps(entries, options, existing)
    plans = [
        (
            e,
            task_configs(
                e.task,
                e.onnx,
                options,
                tokenizers[e.task.ensemble][0],
                pad_token_id(e.vocab_file),
                labels=e.labels,
                recorded_decoding=e.ner_decoding,
            ),
        )
        for e in entries
    ]
    replaced = set(names)
    kept = set().union(*(existing.members(m) for m in existing.served() if m not in replaced))
    shared = {tokenizers[n][0] for n in names} & kept  # a tokenizer kept models use: identical, left as it is
    for entry, configs in plans:
        clash = sorted({c.name for c in configs} & kept - shared)
        if clash:
            raise ErnieDeployError(
                f"model {entry.task.ensemble!r} would overwrite {', '.join(clash)}, part of another model in "
                f"{repository}",
                "give the model another --name",
            )
    with staging_dir(repository.parent, f"{repository.name}.staging") as staging:
        written = _write_models(plans, staging / "new", options, tokenizers, skip=shared, thresholds=thresholds)
        new = {path.name for path in (staging / "new").iterdir()}
        (staging / "old").mkdir()
        for model_dir in sorted((staging / "new").iterdir()):
            final = repository / model_dir.name
            if final.exists():
                os.replace(final, staging / "old" / model_dir.name)
            os.replace(model_dir, final)
        # What the replaced models used and nothing uses now: their old steps, and unshared tokenizers.
        stale = set().union(*(existing.members(m) for m in replaced)) - new - kept
        for name in sorted(stale):
            if (repository / name).is_dir():
                os.replace(repository / name, staging / "old" / name)
        return [repository / path.relative_to(staging / "new") for path in written]


def _write_models(
    plans,
    repository: Path,
    options: BuildOptions,
    tokenizers: dict[str, tuple[str, str, bytes]],
    skip: set[str],
    thresholds: dict[str, dict[str, float] | None],
) -> list[Path]:
    written = []
    repository.mkdir(parents=True, exist_ok=True)
    for entry, configs in plans:
        tokenizer, fingerprint, payload = tokenizers[entry.task.ensemble]
        for config in configs:
            if config.name in skip:
                continue
            if config.name == tokenizer:
                config.parameters[SETTINGS_PARAMETER].string_value = fingerprint
            model_dir = repository / config.name
            version_dir = model_dir / VERSION
            version_dir.mkdir(parents=True, exist_ok=True)
            write_text(model_dir / "config.pbtxt", render(config))
            for name, data in warmup_files(config).items():
                with atomic_path(model_dir / "warmup" / name) as tmp:
                    tmp.write_bytes(data)
            if model_dir / "config.pbtxt" not in written:
                written.append(model_dir / "config.pbtxt")
            step = _python_step(config, entry.task)
            if step:
                write_text(version_dir / "model.py", MODEL_PY.format(name=config.name, step=step))
        task = entry.task
        homes = (
            {name: task.ensemble for name in ("tokenizer", "model", "labels")}
            if options.fused
            else {"tokenizer": tokenizer, "model": task.model_step, "labels": task.postprocess_step}
        )
        if options.tokenizer_in_model:
            homes["tokenizer"] = task.model_step
        if options.graph_postprocess:
            homes["labels"] = task.model_step  # in the graph too; the file says which labels it was built with
        if homes["tokenizer"] not in skip:
            with atomic_path(repository / homes["tokenizer"] / VERSION / "tokenizer.json", suffix=".json") as tmp:
                tmp.write_bytes(payload)
        _write_model_file(entry, options, repository / homes["model"] / VERSION / "model.onnx")
        write_json(entry.labels, repository / homes["labels"] / VERSION / "labels.json")
        if thresholds.get(task.ensemble) is not None:
            write_json(thresholds[task.ensemble], repository / homes["labels"] / VERSION / THRESHOLDS_FILE)
    for version_dir in repository.glob(f"*/{VERSION}"):
        if not any(version_dir.iterdir()):  # an ensemble's version folder: keep it when committed to git
            (version_dir / ".gitkeep").touch()
    return written


def _write_model_file(entry: TaskArtifacts, options: BuildOptions, path: Path) -> None:
    """model.onnx as converted; a windowed model on the ORT backend takes [batch, windows, tokens] (windows.py);
    with --graph-postprocess the postprocess is appended to the graph (postprocess_graph.py)."""
    if options.graph_postprocess:
        from ernie_deploy.repository.postprocess_graph import write_with_postprocess

        write_with_postprocess(entry.task, entry.onnx, entry.labels, path)
        return
    if options.runtime == "onnxruntime" and not options.fused and long_text_mode(entry.task, options) == "window":
        from ernie_deploy.repository.windows import window_model

        window_model(entry.onnx, path)
        return
    with atomic_path(path, suffix=".onnx") as tmp:
        shutil.copyfile(entry.onnx, tmp)


def build_version(
    entry: TaskArtifacts, repository: str | Path, options: BuildOptions = BuildOptions(), *, version: int
) -> list[Path]:
    """Add `version` of an existing model beside the one serving (`build --name N --version V`); what serves does
    not change: the configs are rewritten to pin the serving version, so a restart keeps serving it too, and
    `ernie-deploy rollout` moves to the new one. Returns the version folders written."""
    from ernie_deploy.repository.versions import VersionedModel, without_versions

    name = entry.task.ensemble
    thresholds = entry.checked_thresholds()
    if version < 1:
        raise ErnieDeployError(f"version {version} is not a version number", "use a whole number from 1")
    if options.fused:
        raise ErnieDeployError("a fused model has no steps to version", "drop --fused")
    repository = Path(repository).absolute()
    model = VersionedModel.read(repository, name)
    serving = model.serving()
    if version == serving:
        raise ErnieDeployError(f"version {version} of {name!r} is serving", "give the new version another number")
    existing = _Existing.read(repository)
    tokenizer = model.ensemble.ensemble_scheduling.step[0].model_name
    recorded = existing.configs.get(tokenizer)
    fingerprint = _fingerprint(entry, options, _tokenizer_json(entry.vocab_file))
    if recorded is None or recorded.parameters[SETTINGS_PARAMETER].string_value != fingerprint:
        raise ErnieDeployError(
            f"the new version of {name!r} tokenizes differently (vocabulary, lowercasing, max_seq_len or build "
            "options): a version keeps its model's tokenizer",
            f"build it as a new model with another --name, or use the options {name!r} was built with",
        )
    configs = {
        c.name: c
        for c in task_configs(
            entry.task,
            entry.onnx,
            options,
            tokenizer,
            pad_token_id(entry.vocab_file),
            labels=entry.labels,
            recorded_decoding=entry.ner_decoding,
        )
    }
    for step, current in model.steps.items():
        _unrecorded_default_decoding(configs[step], current)
        if without_versions(configs[step]) != without_versions(current):
            raise ErnieDeployError(
                f"version {version} of {name!r} does not fit {step}'s config (another signature, label count or "
                "build options)",
                f"build it as a new model with another --name, or use the options {name!r} was built with",
            )
    written = []
    with staging_dir(repository.parent, f"{repository.name}.staging") as staging:
        task = entry.task
        for step, files in ((task.model_step, {"model.onnx": entry.onnx}), (task.postprocess_step, {})):
            folder = staging / step / str(version)
            folder.mkdir(parents=True)
            if files:
                _write_model_file(entry, options, folder / "model.onnx")
            if step == task.postprocess_step:
                write_json(entry.labels, folder / "labels.json")
                if thresholds is not None:
                    write_json(thresholds, folder / THRESHOLDS_FILE)
            python_step = _python_step(configs[step], task)
            if python_step:
                (folder / "model.py").write_text(MODEL_PY.format(name=step, step=python_step), encoding="utf-8")
        (staging / "old").mkdir()
        for step in (task.model_step, task.postprocess_step):
            final = repository / step / str(version)
            if final.exists():
                os.replace(final, staging / "old" / f"{step}-{version}")
            os.replace(staging / step / str(version), final)
            written.append(final)
    for step, current in model.steps.items():
        if not current.version_policy.specific.versions:
            model.write(model.with_versions(step, [serving]))
    model.write(model.pinned(serving))
    return written


def _unrecorded_default_decoding(new: mc.ModelConfig, current: mc.ModelConfig) -> None:
    """A postprocess built before the NER decoding was recorded runs the default one: a new version that decodes
    the same way fits it, so the parameter it would add is left out of the comparison."""
    from ernie_deploy.serving.entities import DECODING_PARAMETER, DEFAULT_DECODING

    if DECODING_PARAMETER in current.parameters or DECODING_PARAMETER not in new.parameters:
        return
    if new.parameters[DECODING_PARAMETER].string_value == DEFAULT_DECODING:
        del new.parameters[DECODING_PARAMETER]


def remove(repository: str | Path, names: list[str]) -> None:
    """Take served models out of `repository`: each model with its steps, and a tokenizer only when no model
    left uses it. The other models' files stay as they were."""
    repository = Path(repository).absolute()
    existing = _Existing.read(repository)
    unknown = sorted(set(names) - set(existing.served()))
    if unknown:
        raise ErnieDeployError(f"{repository} serves no model {', '.join(unknown)}", "check the names")
    kept = set().union(*(existing.members(m) for m in existing.served() if m not in names))
    gone = set().union(*(existing.members(m) for m in names)) - kept
    with staging_dir(repository.parent, f"{repository.name}.staging") as staging:
        for name in sorted(gone):
            if (repository / name).is_dir():
                os.replace(repository / name, staging / name)


def pick_runtime(backends: set[str]) -> str:
    """`--runtime auto`: the ORT backend when the target server has it, else the python-backend model step."""
    return "onnxruntime" if "onnxruntime" in backends else "python"
