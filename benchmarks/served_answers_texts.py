"""The texts benchmarks/served_answers.py sends each model: its task's test split (read without the package's
readers, so an older checkout is asked the same), edge texts, a batch, pairs and schemas."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from ernie_deploy.core.errors import BadDataError, BadRepositoryError

TEXTS_PER_MODEL = 200
BATCH = 8  # texts of the one batched request: answers of a padded batch can differ from those of lone texts


# The split each task's clients score on (fetch/datasets.py and the kinds' split formats), read here without the
# package's readers so that an older checkout's answers are read with the same texts.
SPLITS = {
    "seq_cls": ("thucnews", "test.tsv"),
    "pair_cls": ("thucnews_pairs", "test.tsv"),
    "multi_label": ("msra_multilabel", "test.labels.tsv"),
    "token_cls": ("msra_ner", "test.jsonl"),
    "uie": ("msra_ner", "test.jsonl"),
}
SCHEMA = '["人名", "地名", "机构名"]'

# Past 512 tokens (the longest max_seq_len a demo model takes) and within the 8,000 characters a windowed model
# accepts; full stops let the sentence windows cut it, names and places give the taggers something to find.
LONG_TEXT = "".join(
    f"第{i}天，张伟和李娜从北京出发，经过上海和杭州，到达深圳参加华为公司举办的人工智能大会。" for i in range(60)
)
# Past the classifiers' 128 tokens, and within the rows one extraction request may take (a schema of a few types
# over the long text takes more: its refusal is an answer too).
MEDIUM_TEXT = LONG_TEXT[: len(LONG_TEXT) // 3]
NAMED_TEXT = "张伟和李娜从北京出发，到达深圳参加华为公司举办的人工智能大会。"
EDGE_TEXTS = {
    "long": LONG_TEXT,
    "medium": MEDIUM_TEXT,
    "one_char": "好",
    "mixed": "ERNIE 3.0 在 2024 年发布🚀🎉 café naïve Ελληνικά русский عربي 한국어 日本語テキスト 👨‍👩‍👧",
    "whitespace": " \t ",
    "empty": "",
}
EDGE_PAIRS = {
    "long": LONG_TEXT[:700],
    "medium": NAMED_TEXT,
    "one_char": "坏",
    "mixed": "Hello 世界 🌏 naïve",
    "whitespace": " ",
    "empty": "",
}


# --------------------------------------------------------------------------------------------------------------------
# The texts


def _read_tsv(path: Path) -> list[tuple[str, ...]]:
    # QUOTE_NONE with backslash escapes: how the splits are written (fetch/data.py)
    with open(path, encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE, escapechar="\\")
        header = next(reader)
        columns = [header.index(c) for c in ("text", "text_pair") if c in header]
        return [tuple(row[c] for c in columns) for row, _ in zip(reader, range(TEXTS_PER_MODEL))]


def split_texts(data: Path, task: str) -> list[tuple[str, ...]]:
    """The first TEXTS_PER_MODEL test texts of `task`'s split: (text,) or (text, text_pair) each."""
    if task not in SPLITS:
        raise BadRepositoryError(
            f"a served model names task {task!r}, which has no test split known here",
            "add it to SPLITS in benchmarks/served_answers_texts.py with its dataset and split file",
        )
    dataset, name = SPLITS[task]
    path = data / dataset / name
    if not path.exists():
        raise BadDataError(f"no split file {path}", "run `ernie-deploy fetch-data`, or pass --data")
    if name.endswith(".jsonl"):
        with open(path, encoding="utf-8") as fh:
            return [(json.loads(line)["text"],) for line, _ in zip(fh, range(TEXTS_PER_MODEL))]
    return _read_tsv(path)


def requests_for(task: str, inputs: list[dict], data: Path) -> list[tuple[str, list[dict]]]:
    """(key, items) per request a model of `task` gets; each item maps input names to the text sent."""
    names = [i["name"] for i in inputs]
    # `text_pair`, or `INPUT_PAIR` where the model answers in PaddleNLP's tensors
    pair_input = next((n for n in names if n.lower().endswith("_pair")), None)
    schema_input = "schema" if "schema" in names else None
    text_input = next((n for n in names if n not in (pair_input, schema_input)), None)
    known = {text_input, pair_input, schema_input}
    required = [i["name"] for i in inputs if not i["optional"] and i["name"] not in known]
    if text_input is None or required:
        raise BadRepositoryError(
            f"a {task} model takes inputs {names}, which this tool cannot fill",
            f"teach requests_for in benchmarks/served_answers_texts.py what to send as {required or 'the text'}",
        )
    texts = split_texts(data, task)

    def item(text: str, pair: str | None = None, schema: str | None = None) -> dict:
        out = {text_input: text}
        if pair_input:
            out[pair_input] = pair if pair is not None else ""
        if schema is not None:
            out[schema_input] = schema
        return out

    requests = []
    for i, row in enumerate(texts):
        requests.append((f"test:{i}", [item(*row)]))
    for key, text in EDGE_TEXTS.items():
        requests.append((f"edge:{key}", [item(text, EDGE_PAIRS[key] if pair_input else None)]))
    requests.append((f"batch:0-{BATCH - 1}", [item(*row) for row in texts[:BATCH]]))
    if schema_input:
        for i, row in enumerate(texts[:20]):
            requests.append((f"schema:test:{i}", [item(*row, schema=SCHEMA)]))
        requests.append(("schema:edge:long", [item(LONG_TEXT, schema=SCHEMA)]))
        requests.append(("schema:edge:medium", [item(MEDIUM_TEXT, schema=SCHEMA)]))
        requests.append(("schema:named", [item(NAMED_TEXT, schema=SCHEMA)]))
        requests.append(("schema:relation", [item(NAMED_TEXT, schema='{"人名": ["地名"]}')]))
    return requests
