"""InsuranceQA's Chinese questions and answers (PyPI `insuranceqa-data==1.2`) as retrieval splits of (question,
answer) pairs: the embed and rerank kinds' data (docs/TASKS.md)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from ernie_deploy.fetch.data import SPLITS
from ernie_deploy.fetch.dataset_archives import ArchiveSpec, DatasetSpec, read_member_bytes


def _one_line(text: str) -> str:
    """A text on one line: runs of whitespace (the answers' line breaks and non-breaking spaces) as one space."""
    return " ".join(text.split())


def _insuranceqa_splits(spec: DatasetSpec, archive: Path) -> dict[str, list[tuple[str, str]]]:
    """(question, answer) pairs, one per answer a question names as its own, in the package's train, valid (dev) and
    test splits. A dev or test question whose text is also a train question's is left out: its answers would be
    scored as if unseen."""
    answers = json.loads(gzip.decompress(read_member_bytes(archive, spec.members["answers"])))
    splits, seen = {}, set()
    for name in SPLITS:
        questions = json.loads(gzip.decompress(read_member_bytes(archive, spec.members[name])))
        rows = []
        for key in sorted(questions, key=int):
            question = _one_line(questions[key]["zh"])
            if not question or (name != "train" and question in seen):
                continue
            for answer in questions[key]["answers"]:
                passage = _one_line(answers[str(answer)]["zh"])
                if passage:
                    rows.append((question, passage))
        if name == "train":
            seen = {question for question, _ in rows}
        splits[name] = rows
    return splits


# Retrieval (docs/TASKS.md, embed and rerank): InsuranceQA's questions and the answers written for them (Chinese
# version, machine-translated from the English corpus of Feng et al. 2015), with the package's own splits; a split's
# answers are the corpus its questions are searched in. Version 1.2 is the last whose archive holds the data.
INSURANCEQA = DatasetSpec(
    name="insuranceqa",
    archive=ArchiveSpec(
        requirement="insuranceqa-data==1.2",
        filename="insuranceqa_data-1.2.tar.gz",
        sha256="3e1eaa2a8cc3a785b059d52f473c0e7280ba5de045a300701cb731a8b8cb16b3",
        source_only=True,
    ),
    members={
        "train": "insuranceqa_data-1.2/insuranceqa_data/train.json.gz",
        "dev": "insuranceqa_data-1.2/insuranceqa_data/valid.json.gz",
        "test": "insuranceqa_data-1.2/insuranceqa_data/test.json.gz",
        "answers": "insuranceqa_data-1.2/insuranceqa_data/answers.json.gz",
    },
    split=_insuranceqa_splits,
    split_format="pairs.tsv",
)
