"""Writing files so that a crash never leaves a half-written output: stage beside the target, then rename."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def staging_dir(parent: str | os.PathLike, label: str) -> Iterator[Path]:
    """A private, empty folder inside `parent`, removed on exit whatever happened.

    Being on the same filesystem as its destination, whatever is made in it moves into place with os.replace,
    an atomic rename: build whole outputs here, move them in only once complete and checked.
    """
    parent = Path(parent)
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{label}.", suffix=".tmp", dir=parent))
    try:
        yield tmp
    finally:
        _rmtree(tmp)


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
    shutil.rmtree(path, ignore_errors=True)


def write_json(data: dict | list, path: str | os.PathLike) -> Path:
    """Write `data` as indented UTF-8 JSON, atomically."""
    path = Path(path)
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(data, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return path
