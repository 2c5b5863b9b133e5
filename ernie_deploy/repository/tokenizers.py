"""Which tokenizer step serves which model: models whose tokenizer models would be identical share one (real ERNIE
3.0 checkpoints of one size share a vocabulary), each known by a fingerprint of its config and tokenizer.json.

A model that reads its texts cut (a classifier) never asks for windows, so the window settings do not change what it
gets: it shares the tokenizer of a model of the same vocabulary that reads windows of any size."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from ernie_deploy.core.tasks import TOKENIZER_STEP
from ernie_deploy.repository.configs import WINDOW_PARAMETERS, render, tokenizer_config
from ernie_deploy.repository.served import FIRST_VERSION, TOKENIZER_FINGERPRINT_PARAMETER, Existing
from ernie_deploy.serving.tokenizer import build_tokenizer


@dataclass(frozen=True)
class TokenizerStep:
    name: str  # the Triton model
    fingerprint: str  # its TOKENIZER_FINGERPRINT_PARAMETER
    payload: bytes  # its tokenizer.json
    owner: bool  # whether this model's config is the one written for it (else another model's, or kept as it is)


def tokenizer_json(vocab_file: Path) -> bytes:
    """The tokenizer.json the tokenizer model of this vocabulary holds."""

    return build_tokenizer(vocab_file).to_str(pretty=True).encode("utf-8")


def digest(config: mc.ModelConfig, payload: bytes, *, windows: bool = True) -> str:
    """A tokenizer model's fingerprint: its config under a fixed name (its own fingerprint left out) and its
    tokenizer.json; with windows=False the window settings are left out too."""
    copy = mc.ModelConfig()
    copy.CopyFrom(config)
    copy.name = "tokenizer"
    for key in (TOKENIZER_FINGERPRINT_PARAMETER, *(() if windows else WINDOW_PARAMETERS)):
        if key in copy.parameters:
            del copy.parameters[key]
    return hashlib.sha256(render(copy).encode() + b"\0" + payload).hexdigest()


def model_tokenizer(model, payload: bytes) -> tuple[mc.ModelConfig, bool]:
    """The tokenizer config `model` (its record as served) has, and whether it reads windows."""
    return tokenizer_config("tokenizer", model), model.long_text == "window"


def kept_digest(existing: Existing, name: str) -> str | None:
    """The window-free fingerprint of tokenizer model `name` in the repository, None where its file is missing."""
    path = (existing.repository or Path(".")) / name / FIRST_VERSION / "tokenizer.json"
    if not path.is_file():
        return None
    return digest(existing.configs[name], path.read_bytes(), windows=False)


def tokenizer_steps(entries: list, records: dict, existing: Existing | None = None) -> dict:
    """model name -> TokenizerStep, for `entries` (build.ModelArtifacts) as their `records` (per model name) serve. A
    tokenizer the repository already has keeps its name; a new one is `ernie_tokenizer` while that name is free,
    else `ernie_tokenizer_<fingerprint>`. Models that read windows are placed first, so that a model reading cut
    texts joins their tokenizer."""
    existing = existing or Existing({})
    replaced = {e.name for e in entries}
    kept = set().union(*(existing.members(m) for m in existing.served() if m not in replaced))
    full = {fp: name for fp, name in existing.tokenizers().items() if name in kept}
    base = {kept_digest(existing, name): name for name in full.values()}
    fingerprint_of = {name: fp for fp, name in full.items()}
    taken = set(existing.configs) - set().union(*(existing.members(m) for m in replaced)) | kept
    out = {}
    prepared = []
    for entry in entries:
        payload = tokenizer_json(entry.vocab_file)
        config, windows = model_tokenizer(records[entry.name], payload)
        prepared.append((not windows, entry.name, entry, payload, config, windows))
    for _, model, _, payload, config, windows in sorted(prepared, key=lambda p: p[:2]):
        own, shared = digest(config, payload), digest(config, payload, windows=False)
        name = full.get(own) or (None if windows else base.get(shared))
        if name is not None:
            out[model] = TokenizerStep(name, fingerprint_of[name], payload, owner=False)
            continue
        name = TOKENIZER_STEP if TOKENIZER_STEP not in taken else f"{TOKENIZER_STEP}_{own[:8]}"
        taken.add(name)
        full[own], base[shared], fingerprint_of[name] = name, name, own
        out[model] = TokenizerStep(name, own, payload, owner=True)
    return out
