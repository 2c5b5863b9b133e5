"""Where things live: a content-keyed cache outside the checkout, and the working artifacts inside it."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """Heavy, reusable artifacts (archives, trained bootstrap models), keyed by content.

    Outside the checkout so that a fresh clone on the same machine (CI) reuses them.
    """
    root = os.environ.get("ERNIE_DEPLOY_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ernie-deploy"
    )
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def artifacts_dir() -> Path:
    """Per-checkout outputs: data splits, checkpoints, static and ONNX models, reports (git-ignored)."""
    return Path(os.environ.get("ERNIE_DEPLOY_ARTIFACTS") or "artifacts")


def artifact_dir(kind: str, name: str) -> Path:
    """artifacts/<kind>/<name>: where a stage's output for one model lives (kind: checkpoints, static, onnx)."""
    return artifacts_dir() / kind / name
