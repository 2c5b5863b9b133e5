"""The prepared splits of a dataset: where they live (`data_dir`), their file formats, and the label ids read from
them. A split is stored as TSV (text classification: `label<TAB>text`, or `label<TAB>text<TAB>text_pair`), JSON Lines
(NER: `{"text": ..., "labels": [one BIO tag per character]}`) or label-set TSV (multi-label classification:
`labels<TAB>text`, the labels joined by "|", empty for none). Where the datasets come from, and how they are split,
is ernie_deploy.fetch.datasets.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from ernie_deploy.core.errors import BadDataError, BadOptionsError
from ernie_deploy.core.files import atomic_path
from ernie_deploy.core.paths import artifacts_dir

SPLITS = ("train", "dev", "test")
FORMATS = ("tsv", "jsonl", "labels.tsv", "pairs.tsv")
JSONL_FIX = (
    'write each line as one JSON object, {"text": "...", "labels": [one tag per character]}, or re-run '
    "`ernie-deploy fetch-data`"
)
LABEL_SEPARATOR = "|"  # between the labels of one text in a label-set TSV


# The TSV headers: a label and a text; a label and a text pair (read back as (text, text_pair) tuples); a label set
# and a text (`write_label_sets`: a text's labels joined by LABEL_SEPARATOR, read back as a sorted list of names); a
# query and a passage that answers it (retrieval: read back as (query, passage) tuples, each labelled RELEVANT).
TSV_HEADERS = (["label", "text"], ["label", "text", "text_pair"], ["labels", "text"], ["query", "passage"])
RELEVANT = "relevant"


def write_tsv(path: Path, rows: list[tuple[str, ...]], header: str = "label") -> None:
    """(label, text) or (label, text, text_pair) rows under their header, atomically."""
    width = len(rows[0]) if rows else 2
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8", newline="") as fh:
            writer = csv.writer(fh, delimiter="\t", quoting=csv.QUOTE_NONE, escapechar="\\", lineterminator="\n")
            writer.writerow([header, "text", "text_pair"][:width])
            writer.writerows(rows)


def read_tsv(path: str | Path) -> tuple[list, list]:
    """Read a TSV split file with one of TSV_HEADERS; returns (texts, labels): each text a str, or a (text, text_pair)
    tuple; each label a name, or for a `labels` file a sorted list of names."""
    path = Path(path)
    if not path.exists():
        raise BadDataError(f"no such data file: {path}", "run `ernie-deploy fetch-data` first")
    texts, labels = [], []
    with open(path, encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE, escapechar="\\")
        header = next(reader, None)
        if header not in TSV_HEADERS:
            raise BadDataError(
                f"{path}: expected a `label<TAB>text`, `label<TAB>text<TAB>text_pair`, `labels<TAB>text` or "
                f"`query<TAB>passage` header, got {header}",
                "give the file one of those header lines, fields separated by tabs; in a `labels` file, join a "
                "text's labels with '|'",
            )
        sets, retrieval = header[0] == "labels", header[0] == "query"
        for row in reader:
            if len(row) != len(header):
                raise BadDataError(
                    f"{path}:{reader.line_num}: expected {len(header)} tab-separated fields, got {len(row)}",
                    "give every row the header's fields, separated by tabs; a tab or line break inside a text "
                    "needs a backslash before it",
                )
            if retrieval:
                texts.append((row[0], row[1]))
                labels.append(RELEVANT)
                continue
            labels.append(sorted(set(filter(None, row[0].split(LABEL_SEPARATOR)))) if sets else row[0])
            texts.append(row[1] if len(row) == 2 else (row[1], row[2]))
    return texts, labels


def write_pairs(path: Path, rows: list[tuple[str, str]]) -> None:
    """(query, passage) rows under a `query<TAB>passage` header, atomically."""
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8", newline="") as fh:
            writer = csv.writer(fh, delimiter="\t", quoting=csv.QUOTE_NONE, escapechar="\\", lineterminator="\n")
            writer.writerow(["query", "passage"])
            writer.writerows(rows)


def write_label_sets(path: Path, rows: list[tuple[list[str], str]]) -> None:
    """(labels, text) rows as a `labels<TAB>text` TSV: a text's labels sorted and joined by "|", "" for none."""
    for labels, _ in rows:
        bad = [label for label in labels if not label or LABEL_SEPARATOR in label or "\t" in label]
        if bad:
            raise BadDataError(f"label names {bad} cannot be stored in a label-set TSV", "name labels without '|'")
    write_tsv(path, [(LABEL_SEPARATOR.join(sorted(set(labels))), text) for labels, text in rows], header="labels")


def write_jsonl(path: Path, rows: list[tuple[str, list[str]]]) -> None:
    """(text, per-character labels) rows as `{"text": ..., "labels": [...]}` lines, UTF-8, atomically."""
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8", newline="\n") as fh:
            for text, labels in rows:
                fh.write(json.dumps({"text": text, "labels": list(labels)}, ensure_ascii=False) + "\n")


def read_jsonl(path: str | Path) -> tuple[list[str], list[list[str]]]:
    """Read a file written by `write_jsonl`; returns (texts, labels), one label per character."""
    path = Path(path)
    if not path.exists():
        raise BadDataError(f"no such data file: {path}", "run `ernie-deploy fetch-data` first")
    texts, labels = [], []
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise BadDataError(f"{path}:{number}: not JSON: {exc}", JSONL_FIX) from None
            text = row.get("text") if isinstance(row, dict) else None
            tags = row.get("labels") if isinstance(row, dict) else None
            if not isinstance(text, str) or not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
                raise BadDataError(f'{path}:{number}: expected {{"text": str, "labels": [str, ...]}}', JSONL_FIX)
            if len(tags) != len(text):
                raise BadDataError(
                    f"{path}:{number}: {len(tags)} labels for a text of {len(text)} characters (one per character)",
                    "re-run `ernie-deploy fetch-data`, or fix the file so each character has one label",
                )
            texts.append(text)
            labels.append(tags)
    return texts, labels


def task_texts(task, texts: list) -> list:
    """`texts` as `task` reads them: a one-text task without a label head (an embedding model) reads each side of a
    (query, passage) pair as a text of its own; the others take them as they are."""
    one_text = len(task.inputs) == 1 and not task.kind_facts.label_head
    if one_text and texts and all(isinstance(t, tuple) for t in texts):
        return [side for pair in texts for side in pair]
    return texts


def split_file(directory: str | Path, split: str, fmt: str) -> Path:
    """The file holding one split: `<directory>/<split>.<fmt>`."""
    if fmt not in FORMATS:
        raise BadOptionsError(f"unknown split format {fmt!r}", f"use one of: {', '.join(FORMATS)}")
    return Path(directory) / f"{split}.{fmt}"


def read_split(directory: str | Path, split: str, fmt: str) -> tuple[list[str], list]:
    """(texts, labels) of one split: labels are names ("tsv"), per-character tag lists ("jsonl") or lists of
    names ("labels.tsv")."""
    return read_split_file(split_file(directory, split, fmt))


def read_split_file(path: str | Path) -> tuple[list[str], list]:
    """(texts, labels) of a split file, its format chosen by the suffix (.tsv or .jsonl) and a TSV's header."""
    path = Path(path)
    if path.suffix == ".tsv":
        return read_tsv(path)
    if path.suffix == ".jsonl":
        return read_jsonl(path)
    raise BadDataError(f"{path}: unknown split file type", "pass a .tsv or .jsonl file")


def data_dir(dataset: str, root: Path | None = None) -> Path:
    return (root or artifacts_dir() / "data") / dataset


def label_names(train_labels: list[str]) -> list[str]:
    """Label ids are the sorted label names: stable whatever order the data comes in."""
    return sorted(set(train_labels))


def label_set_names(train_labels: list[list[str]]) -> list[str]:
    """Label ids for multi-label classification: every name any train text carries, sorted."""
    return sorted({label for labels in train_labels for label in labels})


def entity_label_names(train_labels: list[list[str]]) -> list[str]:
    """Tag ids for NER: "O" first (id 0), then the other tags sorted, whatever order the data comes in."""
    tags = {tag for sentence in train_labels for tag in sentence}
    return ["O", *sorted(tags - {"O"})]
