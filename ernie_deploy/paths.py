"""Where things live: a content-keyed cache outside the checkout, and the working artifacts inside it."""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
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


@contextmanager
def atomic_path(final: str | os.PathLike, suffix: str = ""):
    """Yield a temporary path next to `final`; rename it into place only if the block succeeds.

    Works for files and directories, so a crash never leaves a half-written output behind.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=suffix + ".tmp", dir=final.parent)
    os.close(fd)
    os.unlink(tmp)
    tmp = Path(tmp)
    try:
        yield tmp
        if final.is_dir() and tmp.is_dir():
            _rmtree(final)
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            _rmtree(tmp) if tmp.is_dir() else tmp.unlink()


def _rmtree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)
