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

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from ernie_deploy.core.errors import BadOptionsError, BadRepositoryError
from ernie_deploy.core.files import atomic_path, staging_dir, write_json
from ernie_deploy.core.spec import SPEC_FILE, SPEC_PARAMETER, ModelSpec
from ernie_deploy.repository.configs import render, warmup_files
from ernie_deploy.repository.layouts import get_layout, task_configs
from ernie_deploy.repository.options import BuildOptions, check_options
from ernie_deploy.repository.reference import check_reference_file, model_reference, write_reference
from ernie_deploy.repository.resolve import resolve
from ernie_deploy.repository.served import SETTINGS_PARAMETER, Existing
from ernie_deploy.repository.tokenizers import TokenizerStep, tokenizer_steps
from ernie_deploy.serving.multi_label import THRESHOLDS_FILE

VERSION = "1"


@dataclass(frozen=True)
class ModelArtifacts:
    """One model as `build` takes it: its record (core.spec: name, task, labels, decoding, the token length it was
    trained on, the thresholds `convert` chose), and the files beside it: the converted model, the vocabulary and, for
    a model with per-label thresholds, a thresholds file that overrides the recorded ones (default: those `convert`
    recorded, else thresholds.json beside the ONNX model). The build reads the record and records it, completed, on
    the served model; every served parameter is generated from that completed record."""

    model: ModelSpec
    onnx: Path
    vocab_file: Path
    thresholds_file: Path | None = None

    def __post_init__(self):
        object.__setattr__(self, "onnx", Path(self.onnx))
        object.__setattr__(self, "vocab_file", Path(self.vocab_file))

    @property
    def name(self) -> str:
        return self.model.name

    def checked_thresholds(self) -> dict[str, float] | None:
        """The model's thresholds, checked against its labels (None: its task has none)."""
        if not self.model.task_spec.per_label_thresholds:
            return None
        from ernie_deploy.serving.multi_label import check_thresholds, read_thresholds

        labels = list(self.model.labels)
        if self.thresholds_file is None and self.model.thresholds is not None:
            return check_thresholds(self.model.thresholds, labels, "the thresholds `convert` recorded")
        return read_thresholds(self.thresholds_file or self.onnx.parent / THRESHOLDS_FILE, labels)

    def served(self, options: BuildOptions) -> ModelSpec:
        """The record as served under `options` (repository.resolve), with the thresholds it serves; the build adds
        the tokenizer's fingerprint and the reference profile. The served configs are generated from it."""
        return resolve(replace(self.model, thresholds=self.checked_thresholds()), options.overrides, options.settings)


def model_artifacts(static, onnx: str | Path, name: str | None = None) -> ModelArtifacts:
    """What `build` reads of a converted model (an export.static.StaticModel and its model.onnx): the record as
    `convert` completed it (model.json beside model.onnx), else as `export` wrote it; under `name` if given."""
    onnx = Path(onnx)
    spec = ModelSpec.read(onnx.parent) if (onnx.parent / SPEC_FILE).is_file() else static.spec
    if name is not None:
        spec = replace(spec, name=name)
    return ModelArtifacts(spec, onnx, static.vocab_file)


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


def write_text(path: Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def build(
    entries: list[ModelArtifacts] | ModelArtifacts,
    repository: str | Path,
    options: BuildOptions,
    log: Callable[[str], None] | None = None,
) -> list[Path]:
    """Add or replace the given models in `repository`; returns the configs written. Each monitored model's record
    carries its reference profile (repository.reference), computed before anything is written; `log` takes a line
    per model saying how it went.

    Every model is generated whole in a staging folder next to the repository and only then moved in, one
    folder rename per model: an interrupted or failed build leaves the previous models as they were, and
    no model folder ever mixes files of two builds. Other models in the repository are left alone, byte for
    byte; a model's former steps that the new build no longer uses (and a tokenizer no model uses any more)
    are removed with it."""
    check_options(options)
    entries = [entries] if isinstance(entries, ModelArtifacts) else list(entries)
    names = [e.name for e in entries]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise BadOptionsError(f"model {', '.join(twice)} is listed twice", "give each model its own --model")
    if options.reference_texts is not None and len(entries) != 1:
        raise BadOptionsError(
            f"--reference gives one model's reference texts; this build has {len(entries)} models ({', '.join(names)})",
            "build the model with --reference on its own (--model N), the others without",
        )
    records = {e.name: e.served(options) for e in entries}  # a bad option or thresholds file fails before any write
    repository = Path(repository).absolute()
    repository.mkdir(parents=True, exist_ok=True)
    existing = Existing.read(repository)
    tokenizers = tokenizer_steps(entries, records, existing)
    plans = []
    for e in entries:
        tokenizer = tokenizers[e.name]
        record = replace(records[e.name], tokenizer_sha256=tokenizer.fingerprint, version=int(VERSION))
        check_reference_file(record, options.reference_texts)  # a bad --reference file fails before any work
        configs = task_configs(record, e.onnx, tokenizer.name, pad_token_id(e.vocab_file))
        plans.append(_Plan(e, record, tokenizer, configs))
    replaced = set(names)
    kept = set().union(*(existing.members(m) for m in existing.served() if m not in replaced))
    shared = {tokenizers[n].name for n in names} & kept  # a tokenizer kept models use: identical, left as it is
    for plan in plans:
        clash = sorted({c.name for c in plan.configs} & kept - shared)
        if clash:
            raise BadOptionsError(
                f"model {plan.record.name!r} would overwrite {', '.join(clash)}, part of another model in {repository}",
                "give the model another --model",
            )
    for plan in plans:
        e = plan.entry
        reference = model_reference(
            plan.record, e.onnx, plan.tokenizer.payload, options.reference_texts, pad_token_id(e.vocab_file), log
        )
        plan.record = replace(plan.record, reference=reference)
    with staging_dir(repository.parent, f"{repository.name}.staging") as staging:
        written = _write_models(plans, staging / "new", skip=shared)
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


@dataclass
class _Plan:
    """One model of a build: its files, its record as served, its tokenizer step and its configs (generated from that
    record)."""

    entry: ModelArtifacts
    record: ModelSpec
    tokenizer: TokenizerStep
    configs: list[mc.ModelConfig]


def _write_models(plans: list[_Plan], repository: Path, skip: set[str]) -> list[Path]:
    written = []
    repository.mkdir(parents=True, exist_ok=True)
    for plan in plans:
        model, tokenizer = plan.record, plan.tokenizer
        layout = get_layout(model.layout)
        python_steps = layout.python_steps(model, tokenizer.name, model.serving.runtime)
        for config in plan.configs:
            if config.name in skip or (config.name == tokenizer.name and not tokenizer.owner):
                continue
            if config.name == tokenizer.name:
                config.parameters[SETTINGS_PARAMETER].string_value = tokenizer.fingerprint
            if config.name == model.name:
                config.parameters[SPEC_PARAMETER].string_value = model.to_json()
            model_dir = repository / config.name
            version_dir = model_dir / VERSION
            version_dir.mkdir(parents=True, exist_ok=True)
            write_text(model_dir / "config.pbtxt", render(config))
            for name, data in warmup_files(config).items():
                with atomic_path(model_dir / "warmup" / name) as tmp:
                    tmp.write_bytes(data)
            if model_dir / "config.pbtxt" not in written:
                written.append(model_dir / "config.pbtxt")
            step = python_steps.get(config.name)
            if step:
                write_text(version_dir / "model.py", MODEL_PY.format(name=config.name, step=step))
        homes = layout.homes(model, tokenizer.name)
        if homes["tokenizer"] not in skip and (homes["tokenizer"] != tokenizer.name or tokenizer.owner):
            with atomic_path(repository / homes["tokenizer"] / VERSION / "tokenizer.json", suffix=".json") as tmp:
                tmp.write_bytes(tokenizer.payload)
        version_dir = repository / homes["model"] / VERSION
        layout.write_model_file(model, plan.entry.onnx, version_dir / "model.onnx")
        write_json(list(model.labels), repository / homes["labels"] / VERSION / "labels.json")
        if model.thresholds is not None:
            write_json(model.thresholds, repository / homes["labels"] / VERSION / THRESHOLDS_FILE)
        if model.reference is not None:
            write_reference(model.reference, repository / layout.answering(model, tokenizer.name) / VERSION)
        model.write(repository / model.name / VERSION)  # the version's record (core.spec)
    for version_dir in repository.glob(f"*/{VERSION}"):
        if not any(version_dir.iterdir()):  # an ensemble's version folder: keep it when committed to git
            (version_dir / ".gitkeep").touch()
    return written


def remove(repository: str | Path, names: list[str]) -> None:
    """Take served models out of `repository`: each model with its steps, and a tokenizer only when no model
    left uses it. The other models' files stay as they were."""
    repository = Path(repository).absolute()
    existing = Existing.read(repository)
    unknown = sorted(set(names) - set(existing.served()))
    if unknown:
        raise BadRepositoryError(f"{repository} serves no model {', '.join(unknown)}", "check the names")
    kept = set().union(*(existing.members(m) for m in existing.served() if m not in names))
    gone = set().union(*(existing.members(m) for m in names)) - kept
    with staging_dir(repository.parent, f"{repository.name}.staging") as staging:
        for name in sorted(gone):
            if (repository / name).is_dir():
                os.replace(repository / name, staging / name)


def pick_runtime(backends: set[str]) -> str:
    """`--runtime auto`: the ORT backend when the target server has it, else the python-backend model step."""
    return "onnxruntime" if "onnxruntime" in backends else "python"
