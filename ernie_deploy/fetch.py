"""Obtain checkpoints: a URL pinned by sha256, a local directory, or the offline bootstrap."""

from __future__ import annotations

import hashlib
from pathlib import Path

from .errors import ErnieDeployError


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_sha256(path: str | Path, expected: str) -> None:
    got = sha256_file(path)
    if got != expected.lower():
        raise ErnieDeployError(
            f"sha256 mismatch for {path}: expected {expected}, got {got}",
            "the file is corrupt or not the pinned release; delete it and fetch again, or fix the pinned sha256",
        )
