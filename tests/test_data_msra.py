"""MSRA NER data: BMES parsing, BMES -> BIO, JSON Lines splits, and the real prepared dataset."""

from __future__ import annotations

import json

import pytest

from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.fetch import data, datasets
from ernie_deploy.fetch.data import (
    entity_label_names,
    read_jsonl,
    read_split,
    read_split_file,
    split_file,
    write_jsonl,
    write_tsv,
)
from ernie_deploy.fetch.datasets import bmes_to_bio, parse_bmes

MSRA_TAGS = {"O", "B-LOC", "B-ORG", "B-PER", "I-LOC", "I-ORG", "I-PER"}


# ---------------------------------------------------------------------------------------------------
# parse_bmes


def test_parse_bmes_crlf_and_blank_lines():
    text = "\r\n\r\n张 B-PER\r\n三 E-PER\r\n去 O\r\n京 S-LOC\r\n\r\n\r\n好 O\r\n"
    assert parse_bmes(text) == [("张三去京", ["B-PER", "E-PER", "O", "S-LOC"]), ("好", ["O"])]


def test_parse_bmes_lf_tabs_and_no_final_newline():
    assert parse_bmes("北\tB-ORG\n大\tE-ORG\n\n一 O") == [("北大", ["B-ORG", "E-ORG"]), ("一", ["O"])]


def test_parse_bmes_character_may_be_whitespace_like():
    # The tag is split off at the last whitespace, so a space or an ideographic space is a character.
    text = "a O\n  O\n\u3000 O\nb O\n"
    assert parse_bmes(text) == [("a \u3000b", ["O", "O", "O", "O"])]


def test_parse_bmes_keeps_line_separator_characters():
    # str.splitlines would cut the sentence at U+2028; it is a character here.
    assert parse_bmes("a O\n\u2028 O\nb O") == [("a\u2028b", ["O", "O", "O"])]


def test_parse_bmes_blank_input():
    assert parse_bmes("") == []
    assert parse_bmes("\r\n \r\n\n") == []


@pytest.mark.parametrize(
    "line",
    ["张", "张B-PER", "张三 B-PER", " O", "张 X-PER", "张 B-", "张 B PER"],
)
def test_parse_bmes_malformed_line_names_source_and_line(line):
    text = f"好 O\r\n\r\n{line}\r\n"
    with pytest.raises(ErnieDeployError) as info:
        parse_bmes(text, source="msra_train.txt")
    assert "msra_train.txt:3" in str(info.value)


# ---------------------------------------------------------------------------------------------------
# bmes_to_bio


def test_bmes_to_bio_all_prefixes():
    tags = ["B-PER", "M-PER", "E-PER", "O", "S-LOC", "B-ORG", "E-ORG", "S-ORG"]
    assert bmes_to_bio(tags) == ["B-PER", "I-PER", "I-PER", "O", "B-LOC", "B-ORG", "I-ORG", "B-ORG"]


def test_bmes_to_bio_is_deterministic_and_leaves_input_alone():
    tags = ["S-PER", "B-LOC", "E-LOC"]
    assert bmes_to_bio(tags) == bmes_to_bio(list(tags)) == ["B-PER", "B-LOC", "I-LOC"]
    assert tags == ["S-PER", "B-LOC", "E-LOC"]


@pytest.mark.parametrize(
    "tags,expected",
    [
        # A sentence that starts inside a name cut off from the previous sentence (as in msra_test.txt).
        (["M-PER", "E-PER", "O"], ["B-PER", "I-PER", "O"]),
        (["E-PER", "B-PER", "E-PER"], ["B-PER", "B-PER", "I-PER"]),
        # An E after a finished entity, or an M/E of another type, starts a new entity.
        (["B-PER", "E-PER", "E-PER"], ["B-PER", "I-PER", "B-PER"]),
        (["S-LOC", "M-LOC", "E-LOC"], ["B-LOC", "B-LOC", "I-LOC"]),
        (["B-LOC", "M-ORG", "E-ORG"], ["B-LOC", "B-ORG", "I-ORG"]),
        (["O", "E-ORG"], ["O", "B-ORG"]),
    ],
)
def test_bmes_to_bio_repairs_entities_without_a_beginning(tags, expected):
    assert bmes_to_bio(tags) == expected


@pytest.mark.parametrize("tag", ["I-PER", "X-PER", "B", "B-", "o", "", "PER"])
def test_bmes_to_bio_unknown_tag(tag):
    with pytest.raises(ErnieDeployError, match="not a BMES tag"):
        bmes_to_bio(["O", tag])


# ---------------------------------------------------------------------------------------------------
# JSON Lines and read_split


def test_jsonl_round_trip(tmp_path):
    rows = [("张三在北京", ["B-PER", "I-PER", "O", "B-LOC", "I-LOC"]), ('a "b"\n', ["O"] * 6), ("", [])]
    path = tmp_path / "sub" / "train.jsonl"
    write_jsonl(path, rows)
    assert read_jsonl(path) == ([t for t, _ in rows], [list(tags) for _, tags in rows])
    raw = path.read_text(encoding="utf-8")
    assert "张三在北京" in raw  # not \u-escaped
    assert raw.count("\n") == len(rows)
    assert [p.name for p in path.parent.iterdir()] == ["train.jsonl"]  # no temporary file left behind


def test_read_jsonl_missing_file(tmp_path):
    with pytest.raises(ErnieDeployError) as info:
        read_jsonl(tmp_path / "dev.jsonl")
    assert "dev.jsonl" in str(info.value) and info.value.fix and "fetch-data" in info.value.fix


def test_read_jsonl_label_count_mismatch(tmp_path):
    path = tmp_path / "dev.jsonl"
    lines = [{"text": "北京", "labels": ["B-LOC", "I-LOC"]}, {"text": "上海", "labels": ["B-LOC"]}]
    path.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines), encoding="utf-8")
    with pytest.raises(ErnieDeployError, match=r"dev\.jsonl:2: 1 labels for a text of 2 characters"):
        read_jsonl(path)


@pytest.mark.parametrize(
    "line", ["not json", "[1, 2]", '{"text": "a"}', '{"text": 1, "labels": ["O"]}', '{"text": "a", "labels": [0]}']
)
def test_read_jsonl_malformed_line(tmp_path, line):
    path = tmp_path / "test.jsonl"
    path.write_text('{"text": "a", "labels": ["O"]}\n' + line + "\n", encoding="utf-8")
    with pytest.raises(ErnieDeployError, match=r"test\.jsonl:2"):
        read_jsonl(path)


def test_read_split_both_formats(tmp_path):
    write_tsv(tmp_path / "dev.tsv", [("sports", "国足公布名单"), ("finance", "股市大涨")])
    write_jsonl(tmp_path / "dev.jsonl", [("国足", ["B-ORG", "I-ORG"])])
    assert read_split(tmp_path, "dev", "tsv") == (["国足公布名单", "股市大涨"], ["sports", "finance"])
    assert read_split(tmp_path, "dev", "jsonl") == (["国足"], [["B-ORG", "I-ORG"]])
    assert read_split_file(tmp_path / "dev.jsonl") == read_split(tmp_path, "dev", "jsonl")
    assert split_file(tmp_path, "test", "jsonl") == tmp_path / "test.jsonl"


def test_read_split_errors(tmp_path):
    with pytest.raises(ErnieDeployError, match="unknown split format"):
        read_split(tmp_path, "dev", "csv")
    with pytest.raises(ErnieDeployError, match="no such data file"):
        read_split(tmp_path, "test", "jsonl")
    with pytest.raises(ErnieDeployError, match="unknown split file type"):
        read_split_file(tmp_path / "dev.txt")


def test_entity_label_names_order():
    labels = [["I-PER", "B-PER", "O"], ["B-ORG", "I-ORG", "B-LOC"], ["I-LOC", "O"]]
    assert entity_label_names(labels) == ["O", "B-LOC", "B-ORG", "B-PER", "I-LOC", "I-ORG", "I-PER"]
    assert entity_label_names(list(reversed(labels))) == entity_label_names(labels)
    assert entity_label_names([["B-PER", "I-PER"]]) == ["O", "B-PER", "I-PER"]  # "O" is id 0 even if absent


def test_split_formats_of_datasets():
    assert datasets.DATASETS["thucnews"].split_format == "tsv"
    assert datasets.DATASETS["msra_ner"].split_format == "jsonl"


# ---------------------------------------------------------------------------------------------------
# The real archive (downloaded once into the content-keyed cache)


def _strict_bio_errors(tags: list[str]) -> list[int]:
    """Positions of I-X tags that do not follow B-X or I-X."""
    return [
        i
        for i, tag in enumerate(tags)
        if tag.startswith("I-") and (i == 0 or tags[i - 1][2:] != tag[2:] or tags[i - 1] == "O")
    ]


def test_prepare_msra_ner(tmp_path):
    out = datasets.prepare("msra_ner", root=tmp_path / "a")
    assert out == tmp_path / "a" / "msra_ner"
    assert sorted(p.name for p in out.iterdir()) == ["SOURCE", "dev.jsonl", "test.jsonl", "train.jsonl"]
    splits = {s: read_split(out, s, "jsonl") for s in data.SPLITS}
    assert {s: len(texts) for s, (texts, _) in splits.items()} == {"train": 48289, "dev": 2000, "test": 5000}

    seen = set()
    for texts, labels in splits.values():
        for text, tags in zip(texts, labels):
            assert text and len(tags) == len(text)
            assert not _strict_bio_errors(tags), (text, tags)
            seen.update(tags)
    assert seen == MSRA_TAGS
    assert entity_label_names(splits["train"][1]) == ["O", "B-LOC", "B-ORG", "B-PER", "I-LOC", "I-ORG", "I-PER"]

    # Another folder gives byte-identical files: the dev sample is seeded.
    again = datasets.prepare("msra_ner", root=tmp_path / "b")
    for s in data.SPLITS:
        assert split_file(again, s, "jsonl").read_bytes() == split_file(out, s, "jsonl").read_bytes()

    # Prepared once, later calls reuse the files.
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    assert datasets.prepare("msra_ner", root=tmp_path / "a") == out
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before


def test_prepare_checks_the_files_of_the_dataset_format(tmp_path, monkeypatch):
    """TSV files in an msra_ner folder do not count as prepared: the JSONL ones are what it needs."""
    out = tmp_path / "msra_ner"
    for s in data.SPLITS:
        write_tsv(out / f"{s}.tsv", [])
    (out / "SOURCE").write_text(datasets.MSRA_NER.archive.sha256 + "\n")
    fetched = []

    def fake_fetch(spec):
        fetched.append(spec)
        raise ErnieDeployError("stop here")

    monkeypatch.setattr(datasets, "fetch_archive", fake_fetch)
    with pytest.raises(ErnieDeployError, match="stop here"):
        datasets.prepare("msra_ner", root=tmp_path)
    assert fetched == [datasets.MSRA_NER.archive]


def test_prepare_unknown_dataset(tmp_path):
    with pytest.raises(ErnieDeployError, match="unknown dataset"):
        datasets.prepare("nope", root=tmp_path)
