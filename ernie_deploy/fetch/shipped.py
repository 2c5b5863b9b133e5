"""The demo checkpoints that ship with the repository: `demo/<task>/`, one per bootstrap task, each the
`save_pretrained` folder its recipe trained (config.json, model_state.pdparams, vocab.txt, tokenizer_config.json and
the training record, bootstrap.json) and MANIFEST, which holds:

- `files`: the sha256 of every other file of the folder, checked before every use;
- `cache_key`: the bootstrap cache key of the recipe and data that made it (ernie_deploy.train.bootstrap.cache_key),
  so a checkout whose recipe or data differ from the ones that made it refuses it by name instead of serving another
  model than its recipe says;
- `command`, `seed`, `data` (the sha256 of each split and vocabulary source it read) and `scores` (dev, and test as
  `ernie-deploy eval` scores the exported Paddle model).

The bootstrap (ernie_deploy.train.bootstrap.train) returns a shipped folder where its key matches, so nothing trains
unless asked (`--train`, `--budget`, or a recipe of the caller's).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from ernie_deploy.core.errors import BadCheckpointError
from ernie_deploy.core.files import atomic_path, write_json
from ernie_deploy.fetch.data import split_file

MANIFEST = "manifest.json"

# The repository's demo/ folder: beside the package in a checkout (the project installs itself editable).
SHIPPED_ROOT = Path(__file__).resolve().parents[2] / "demo"


def shipped_dir(task: str, root: Path | None = None) -> Path:
    return Path(root or SHIPPED_ROOT) / task


def manifest(task: str, root: Path | None = None) -> dict[str, Any] | None:
    """The shipped checkpoint's manifest, or None where the task has none."""
    path = shipped_dir(task, root) / MANIFEST
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def find_shipped(key: str, root: Path | None = None) -> Path | None:
    """The shipped folder whose manifest records cache key `key` (unverified), or None."""
    root = Path(root or SHIPPED_ROOT)
    for path in sorted(root.glob(f"*/{MANIFEST}")) if root.is_dir() else ():
        if json.loads(path.read_text(encoding="utf-8")).get("cache_key") == key:
            return path.parent
    return None


def made_from(record: dict[str, Any], data_dir: Path, split_format: str) -> bool:
    """Whether `data_dir` holds the splits the shipped checkpoint of `record` was made from (each split's sha256): a
    caller training on other data gets a model of its own, not this one."""
    made = record.get("data", {}).get("splits_sha256", {})
    return bool(made) and all(
        (path := split_file(Path(data_dir), split, split_format)).is_file() and sha256_file(path) == digest
        for split, digest in made.items()
    )


def verified(task: str, key: str, root: Path | None = None) -> Path:
    """The shipped checkpoint of `task` after checking it: its manifest's cache key is `key` (this checkout's recipe
    and data), and every file it lists has its sha256. Raises BadCheckpointError naming the file or the key."""
    folder = shipped_dir(task, root)
    record = manifest(task, root)
    retrain = f"`ernie-deploy fetch --bootstrap --task {task} --train` trains it on this machine"
    if record is None:
        raise BadCheckpointError(f"no shipped {task} checkpoint at {folder}", f"restore demo/ from git, or {retrain}")
    if record.get("cache_key") != key:
        raise BadCheckpointError(
            f"the shipped {task} checkpoint ({folder}) was made by another recipe or other data than this checkout's "
            f"(its key {str(record.get('cache_key'))[:12]}, this checkout's {key[:12]})",
            f"{retrain}; to ship the new one: `python -m ernie_deploy.cli.ship {task}`",
        )
    for name, digest in record["files"].items():
        path = folder / name
        if not path.is_file():
            raise BadCheckpointError(
                f"the shipped {task} checkpoint lacks {path}", f"restore it: `git checkout -- {folder}`; or {retrain}"
            )
        if sha256_file(path) != digest:
            raise BadCheckpointError(
                f"{path} does not match its sha256 in {folder / MANIFEST}: the file was changed or is incomplete "
                "(a clone without its large files?)",
                f"restore it: `git checkout -- {folder}`; or {retrain}",
            )
    return folder


def write_shipped(task: str, checkpoint: Path, record: dict[str, Any], root: Path | None = None) -> Path:
    """Copy `checkpoint` into demo/<task>/ with its manifest (`record` plus the files' sha256), replacing what was
    there only once the whole folder is written."""
    folder = shipped_dir(task, root)
    with atomic_path(folder) as tmp:
        tmp.mkdir()
        files = {}
        for source in sorted(Path(checkpoint).iterdir()):
            if source.is_file() and source.name != MANIFEST:
                (tmp / source.name).write_bytes(source.read_bytes())
                files[source.name] = sha256_file(tmp / source.name)
        write_json({**record, "task": task, "files": files}, tmp / MANIFEST)
    return folder
