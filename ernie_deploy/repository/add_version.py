"""`build --model N --version V`: a new version of a served model beside the serving one, in the model's own layout.

What serves does not change: the configs are rewritten to pin the serving version (so a restart keeps serving it
too), and `ernie-deploy rollout` moves to the new one (operate/rollout.py). A version keeps its model's tokenizer and
tensor signature (repository/versions.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from ernie_deploy.core.errors import BadOptionsError
from ernie_deploy.core.files import staging_dir, write_json
from ernie_deploy.core.tasks import TOKENIZER_STEP
from ernie_deploy.repository.build import MODEL_PY, ModelArtifacts, pad_token_id
from ernie_deploy.repository.layouts import caches_answers, task_configs
from ernie_deploy.repository.options import BuildOptions, check_options
from ernie_deploy.repository.reference import check_reference_file, model_reference, write_reference
from ernie_deploy.repository.served import SETTINGS_PARAMETER, Existing
from ernie_deploy.repository.tokenizers import digest, kept_digest, model_tokenizer, tokenizer_json
from ernie_deploy.repository.versions import (
    SETTINGS_FILE,
    VersionedModel,
    settings_of,
    without_settings,
    without_versions,
    write_settings,
)
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
    check_options(options)
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
    record = entry.served(options)
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
    # The version's record, beside its settings in the entry's version folder (the serving version's is there from
    # its own build): rollout and rollback move the entry's `model_spec` to it (versions.VersionedModel.pinned).
    written.append(record.write(repository / name / str(version)))
    settings = _version_settings(model, configs)
    if settings != model.current_settings():
        # The version runs with other serving settings (instances, batching, threads): it carries them, and the
        # serving version keeps its own, so that rollout and rollback apply each with its version.
        model.keep_settings(serving)
        folder = repository / name / str(version)
        folder.mkdir(parents=True, exist_ok=True)
        write_settings(settings, folder / SETTINGS_FILE)
        written.append(folder / SETTINGS_FILE)
    if model.routed:
        for step, current in model.steps.items():
            if not current.version_policy.specific.versions:
                model.write(model.with_versions(step, [serving]))
    model.write(model.pinned(serving))
    return written


def _version_settings(model: VersionedModel, configs: dict[str, mc.ModelConfig]) -> dict[str, mc.ModelConfig]:
    """The serving settings of the new version's entry and versioned models. An ensemble's entry takes no larger
    batches than the tokenizer it shares with other models (whose settings a version does not change) takes."""
    settings = {step: settings_of(configs[step]) for step in (model.name, *model.steps)}
    if model.routed:
        tokenizer = model.entry.ensemble_scheduling.step[0].model_name
        shared = configs.get(tokenizer)
        on_disk = model.repository / tokenizer / "config.pbtxt"
        if tokenizer not in model.steps and on_disk.is_file():
            from ernie_deploy.repository.configs import parse

            shared = parse(on_disk.read_text(encoding="utf-8"))
        if shared is not None:
            entry = settings[model.name]
            entry.max_batch_size = min(entry.max_batch_size, shared.max_batch_size)
    return settings


def _served_fingerprint(model: VersionedModel, tokenizer: str) -> str | None:
    """The fingerprint of the tokenizer step a version is served by: the shared step's (a version keeps its model's
    tokenizer), as the serving record says."""
    from ernie_deploy.repository.layouts import entry_record

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
        existing = Existing.read(model.repository)
        recorded = existing.configs.get(tokenizer)
        config, windows = model_tokenizer(record, payload)
        if recorded is None:
            raise refusal
        same = (
            recorded.parameters[SETTINGS_PARAMETER].string_value == digest(config, payload)
            if windows
            else kept_digest(existing, tokenizer) == digest(config, payload, windows=False)
        )
        if not same:
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
    """`options` answering in the wire the model's clients already speak (core.io): a version keeps its model's."""
    from ernie_deploy.core.io import NATIVE
    from ernie_deploy.repository.layouts import entry_record

    record = entry_record(name, model.entry)
    served = (record.io if record is not None else None) or NATIVE
    if options.io is not None and options.io != served:
        raise BadOptionsError(
            f"{name!r} answers its clients in the {served} wire, this version was asked for in {options.io}: the "
            "tensors clients send and read are the model's, not a version's",
            f"build the version with --io {served} (or leave --io out); another wire is a new model: another --model",
        )
    return replace(options, io=served)
