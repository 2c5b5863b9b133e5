"""`build --model N --version V`: a new version of a served model beside the serving one, in the model's own layout.

What serves does not change: the configs are rewritten to pin the serving version (so a restart keeps serving it
too), and `ernie-deploy rollout` moves to the new one (operate/rollout.py). A version keeps its model's tokenizer and
tensor signature (repository/versions.py), and of its serving settings it may change only its own
(core.settings.VersionSettings); its record (`<name>/<V>/model.json`) is all there is of it besides its files.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from ernie_deploy.core.errors import BadOptionsError
from ernie_deploy.core.files import staging_dir, write_json
from ernie_deploy.core.settings import changed_settings
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.core.tasks import TOKENIZER_STEP
from ernie_deploy.repository.build import MODEL_PY, ModelArtifacts, pad_token_id
from ernie_deploy.repository.configs import parse
from ernie_deploy.repository.layouts import caches_answers, entry_record, task_configs
from ernie_deploy.repository.options import BuildOptions
from ernie_deploy.repository.plan import served_wire
from ernie_deploy.repository.reference import check_reference_file, model_reference, write_reference
from ernie_deploy.repository.served import Existing
from ernie_deploy.repository.tokenizers import digest, model_tokenizer, tokenizer_json
from ernie_deploy.repository.version_configs import SHARED_TOKENIZER_VERSION
from ernie_deploy.repository.versions import VersionedModel, without_settings, without_versions
from ernie_deploy.serving.multi_label import THRESHOLDS_FILE


def build_version(
    entry: ModelArtifacts,
    repository: str | Path,
    options: BuildOptions,
    *,
    version: int,
    log: Callable[[str], None] | None = None,
) -> list[Path]:
    """Add `version` of an existing model beside the one serving (`build --model N --version V`), in whatever layout
    the model has; what serves does not change: the configs are rewritten to pin the serving version, so a restart
    keeps serving it too, and `ernie-deploy rollout` moves to the new one. The version's reference profile
    (repository.reference) goes into its answering step's version folder (reference.json): the record on the
    model's entry stays the serving version's. Returns the version folders written."""
    name = entry.name
    if version < 1:
        raise BadOptionsError(f"version {version} is not a version number", "use a whole number from 1")
    repository = Path(repository).absolute()
    model = VersionedModel.read(repository, name)
    layout = model.layout
    if options.layout != layout.name:
        raise BadOptionsError(
            f"{name!r} is served in the {layout.name} layout; this version was asked for in the {options.layout} one",
            f"build the version with --layout {layout.name} (another layout is a new model: another --model)",
        )
    if options.response_cache != caches_answers(model.entry):
        raise BadOptionsError(
            f"{name!r} was built {'with' if caches_answers(model.entry) else 'without'} --cache, this version "
            f"{'with' if options.response_cache else 'without'} it: whether answers are cached is the model's, not "
            "a version's",
            f"build the version {'with' if caches_answers(model.entry) else 'without'} --cache",
        )
    options = _served_wire(name, model, options)
    serving = model.serving_version()
    if version == serving:
        raise BadOptionsError(f"version {version} of {name!r} is serving", "give the new version another number")
    if caches_answers(model.entry) and version in model.on_disk():
        raise BadOptionsError(
            f"{name!r} caches its answers, keyed by model name and version, and version {version} is already on disk: "
            "a running server may hold answers cached for it, which the new files would not give",
            f"give the new version a number not used before (the next one: {max(model.on_disk()) + 1})",
        )
    record = _capped(model, entry.served(options))
    _check_shared_settings(name, version, record, model.record(serving))
    tokenizer, payload = _version_tokenizer(entry, record, model, serving)
    check_reference_file(record, options.reference_texts)  # a bad --reference file fails before any work
    configs = {c.name: c for c in task_configs(record, entry.onnx, tokenizer, pad_token_id(entry.vocab_file))}
    _check_version_fits(name, version, configs, model)
    pad = pad_token_id(entry.vocab_file)
    reference = model_reference(record, entry.onnx, payload, options.reference_texts, pad, log)
    record = replace(
        record, reference=reference, tokenizer_sha256=_served_fingerprint(model, tokenizer), version=version
    )
    written = []
    homes = layout.homes(record, tokenizer)
    answering = layout.answering(record, tokenizer)
    python_steps = layout.python_steps(record, tokenizer, record.serving.runtime)
    with staging_dir(repository.parent, f"{repository.name}.staging") as staging:
        for step in model.steps:
            folder = staging / step / str(version)
            folder.mkdir(parents=True)
            if homes["tokenizer"] == step:
                (folder / "tokenizer.json").write_bytes(payload)
            if homes["model"] == step:
                layout.write_model_file(record, entry.onnx, folder / "model.onnx")
            if homes["labels"] == step:
                write_json(list(record.labels), folder / "labels.json")
                if record.thresholds is not None:
                    write_json(record.thresholds, folder / THRESHOLDS_FILE)
            if answering == step and reference is not None:
                write_reference(reference, folder)
            if step in python_steps:
                (folder / "model.py").write_text(MODEL_PY.format(name=step, step=python_steps[step]), encoding="utf-8")
        (staging / "old").mkdir()
        for step in model.steps:
            final = repository / step / str(version)
            if final.exists():
                os.replace(final, staging / "old" / f"{step}-{version}")
            os.replace(staging / step / str(version), final)
            written.append(final)
    # The version's record in the entry's version folder (the serving version's is there from its own build):
    # rollout and rollback render the configs of the version they move to from it (versions.VersionedModel.pinned).
    written.append(record.write(repository / name / str(version)))
    if model.routed:
        for step, current in model.steps.items():
            if not current.version_policy.specific.versions:
                model.write(model.with_versions(step, [serving], rendered_from=serving))
    model.write(model.pinned(serving))
    return written


def _capped(model: VersionedModel, record: ModelSpec) -> ModelSpec:
    """`record` taking batches no larger than the tokenizer step its model shares with other models takes (a version
    does not change that step's settings, and Triton refuses an ensemble that takes larger batches than a step of
    it). Its configs are rendered from the record and the gateway splits requests by it, so the record says the
    batch size the entry takes."""
    if not model.layout.shares_tokenizer:
        return record
    shared = model.repository / model.entry.ensemble_scheduling.step[0].model_name / "config.pbtxt"
    if not shared.is_file():
        return record  # _version_tokenizer refuses it, by its name

    largest = parse(shared.read_text(encoding="utf-8")).max_batch_size
    if record.serving.max_batch_size <= largest:
        return record
    return replace(record, serving=replace(record.serving, max_batch_size=largest))


def _check_shared_settings(name: str, version: int, record: ModelSpec, served: ModelSpec) -> None:
    """Refuse, by name, a version whose settings differ from the serving version's in one that every version of the
    model shares (core.settings.ModelSettings) or that the models sharing a tokenizer step agree on
    (TokenizerSettings): a version may change only its own (VersionSettings)."""
    kinds = (
        ("model_settings", f"every version of {name!r} shares"),
        ("tokenizer_settings", "the models that share a tokenizer step agree on"),
    )
    for kind, whose in kinds:
        changed = changed_settings(getattr(served.serving, kind), getattr(record.serving, kind))
        if changed:
            said = ", ".join(f"{key} {before} -> {after}" for key, (before, after) in changed.items())
            kept = ", ".join(f"{key} {before}" for key, (before, _) in changed.items())
            raise BadOptionsError(
                f"version {version} of {name!r} changes {said}: {'settings' if len(changed) > 1 else 'a setting'} "
                f"{whose}, not a version's own (instances, batching, queueing, threads)",
                f"build the version with {kept}, as {name!r} serves; other values make a new model: another --model",
            )


def _served_fingerprint(model: VersionedModel, tokenizer: str) -> str | None:
    """The fingerprint of the tokenizer step a version is served by: the shared step's (a version keeps its model's
    tokenizer), as the serving record says."""

    record = entry_record(model.name, model.entry)
    return record.tokenizer_sha256 if record is not None else None


def _version_tokenizer(entry: ModelArtifacts, record, model, serving: int) -> tuple[str, bytes]:
    """The tokenizer step a new version of `model` uses and its tokenizer.json, refused when the version would
    tokenize differently from the model (a version keeps its model's tokenizer)."""
    payload = tokenizer_json(entry.vocab_file)
    refusal = BadOptionsError(
        f"the new version of {model.name!r} tokenizes differently (vocabulary, lowercasing, max_seq_len or build "
        "options): a version keeps its model's tokenizer",
        f"build it as a new model with another --model, or use the options {model.name!r} was built with",
    )
    if model.layout.shares_tokenizer:
        tokenizer = model.entry.ensemble_scheduling.step[0].model_name
        recorded = Existing.read(model.repository).configs.get(tokenizer)
        kept = model.repository / tokenizer / SHARED_TOKENIZER_VERSION / "tokenizer.json"
        config, windows = model_tokenizer(record, payload)
        if recorded is None or not kept.is_file():
            raise refusal
        # The shared step keeps its own instances, batch size and queue: a version's own settings are its own
        # steps' (core.settings.VersionSettings), so the two configs are compared without them. A model that reads
        # no windows does not ask for them, so it is not told apart by them either (repository.tokenizers).
        ours = digest(without_settings(config), payload, windows=windows)
        if digest(without_settings(recorded), kept.read_bytes(), windows=windows) != ours:
            raise refusal
        return tokenizer, payload
    # The tokenizer is in the model's own version folders: the new one must hold the same file (its settings are in
    # the config, compared with the rest of it).
    home = model.layout.homes(record, TOKENIZER_STEP)["tokenizer"]
    if (model.repository / home / str(serving) / "tokenizer.json").read_bytes() != payload:
        raise refusal
    return TOKENIZER_STEP, payload


def _check_version_fits(name: str, version: int, configs: dict[str, mc.ModelConfig], model) -> None:
    for step, current in model.steps.items():
        if without_settings(without_versions(configs[step])) != without_settings(without_versions(current)):
            raise BadOptionsError(
                f"version {version} of {name!r} does not fit {step}'s config (another signature, label count or "
                "build options other than its serving settings: instances, batching, queueing, threads)",
                f"build it as a new model with another --model, or use the options {name!r} was built with",
            )


def _served_wire(name: str, model: VersionedModel, options: BuildOptions) -> BuildOptions:
    """`options` answering in the wire the model's clients already speak (repository.plan.served_wire)."""

    record = entry_record(name, model.entry)
    return replace(options, io=served_wire(name, record.io if record is not None else None, options.io))
