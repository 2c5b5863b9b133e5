"""Whether a classifier reading the head and the tail of a long text does better when the cut falls between
sentences: the same model, the same token budget, three cuts, on documents made of the THUCNews test and dev titles
(`python -m benchmarks.head_tail_sentences`; the figures in docs/LONG_TEXTS.md).

THUCNews here holds titles only, so a long text is made of titles of one class joined as sentences (。 after each), a
seeded 8 to 24 of them: 160-560 characters, past the classifier's 126 tokens. The cuts, each keeping at most
max_seq_len - 2 tokens:
- head: the first tokens;
- head+tail by tokens (what `--long-text head_tail` serves): the first quarter of the budget and the last three
  quarters, wherever they fall;
- head+tail by sentences: as many whole sentences from the start as fit in the head's quarter, then as many whole
  sentences from the end as fit in the rest (a sentence longer than its part is cut by tokens, as above).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import numpy as np

from ernie_deploy.core.files import write_json
from ernie_deploy.core.tasks import get_task
from ernie_deploy.export.static import StaticModel
from ernie_deploy.fetch.data import read_split
from ernie_deploy.fetch.datasets import prepare
from ernie_deploy.serving.encoding import encode_whole
from ernie_deploy.serving.runtime import OnnxModel
from ernie_deploy.serving.tokenizer import CLS, PAD, SEP, build_tokenizer
from ernie_deploy.serving.windows import default_head_tokens, head_tail_keep, sentence_starts


def documents(texts: list[str], labels: list[str], seed: int = 0) -> tuple[list[str], list[str]]:
    """Titles of one class joined into documents of 8 to 24 sentences, in file order."""
    rng = random.Random(seed)
    by_label: dict[str, list[str]] = {}
    for text, label in zip(texts, labels):
        by_label.setdefault(label, []).append(text.strip().rstrip("。") + "。")
    docs, gold = [], []
    for label in sorted(by_label):
        titles = by_label[label]
        at = 0
        while at < len(titles):
            n = rng.randint(8, 24)
            if len(titles) - at < 8:
                break
            docs.append("".join(titles[at : at + n]))
            gold.append(label)
            at += n
    return docs, gold


def _sentence_kept(ids: list[int], starts: list[int], keep: int, head: int) -> list[int]:
    """Token positions kept by a head+tail cut that falls between sentences where it can."""
    n = len(ids)
    if n <= keep:
        return list(range(n))
    bounds = [*starts, n]
    sentences = list(zip(bounds, bounds[1:]))
    head_end = 0
    for _, b in sentences:
        if b <= head:
            head_end = b
        else:
            break
    if head_end == 0:
        head_end = min(head, n)  # a first sentence longer than the head: cut by tokens
    tail_budget = keep - head_end
    tail_start = n
    for a, _ in reversed(sentences):
        if n - a <= tail_budget and a >= head_end:
            tail_start = a
        else:
            break
    if tail_start == n:
        tail_start = max(head_end, n - tail_budget)
    return [*range(head_end), *range(tail_start, n)]


def measure(static_dir: Path, onnx_path: Path, docs: list[str], gold: list[str]) -> dict:

    static = StaticModel.load(static_dir)
    tokenizer = build_tokenizer(static.vocab_file)
    cls, sep, pad = (tokenizer.token_to_id(t) for t in (CLS, SEP, PAD))
    keep = static.max_seq_len - 2
    head = default_head_tokens(static.max_seq_len)
    model = OnnxModel(onnx_path)
    whole = encode_whole(tokenizer, docs)

    def cut(kind: str, text: str, ids: list[int], offsets) -> list[int]:
        if kind == "head":
            return ids[:keep]
        if kind == "head_tail":
            first, last = head_tail_keep(len(ids), keep, head)
            return ids[:first] + (ids[len(ids) - last :] if last else [])
        return [ids[i] for i in _sentence_kept(ids, sentence_starts(text, offsets), keep, head)]

    out = {"documents": len(docs), "characters": sum(len(d) for d in docs), "keep_tokens": keep, "head_tokens": head}
    for kind in ("head", "head_tail", "head_tail_sentences"):
        rows = [[cls, *cut(kind, t, ids, offs), sep] for t, (ids, offs) in zip(docs, whole)]
        predicted = []
        for i in range(0, len(rows), 64):
            batch = rows[i : i + 64]
            width = max(len(r) for r in batch)
            ids = np.full((len(batch), width), pad, dtype=np.int64)
            for r, row in enumerate(batch):
                ids[r, : len(row)] = row
            logits = model(ids, np.zeros_like(ids))
            predicted += [static.labels[k] for k in np.asarray(logits).argmax(-1)]
        correct = sum(p == g for p, g in zip(predicted, gold))
        out[kind] = {"accuracy": correct / len(gold), "correct": correct}
    return out


def main(argv: list[str] | None = None) -> int:

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    p.add_argument("--static", default="artifacts/static/seq_cls")
    p.add_argument("--onnx", default="artifacts/onnx/seq_cls/model.onnx")
    p.add_argument("--report")
    args = p.parse_args(argv)
    task = get_task("seq_cls")
    texts, labels = [], []
    for split in ("test", "dev"):
        t, y = read_split(prepare(task.dataset), split, task.split_format)
        texts += t
        labels += y
    docs, gold = documents(texts, labels)
    report = measure(Path(args.static), Path(args.onnx), docs, gold)
    print(json.dumps(report, indent=2))
    if args.report:
        write_json(report, args.report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
