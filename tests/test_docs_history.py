"""The docs say what is: README.md and every docs/*.md state the current behaviour and each measurement with its
conditions, never a story of how things changed. A line that narrates the past ("the previous default", "an earlier
run", "no longer", "used to") fails here, named by file, line and phrase.

Each phrase is a case-insensitive regex paired with a sentence it must catch; a few sentences of current fact that
share words with them must pass, so that a phrase too broad to be useful fails its own test first."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ("README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")))

# (regex, a line it must flag)
HISTORY: tuple[tuple[str, str], ...] = (
    # "is used to sign" is the present passive, not a habit of the past
    (
        r"(?<!\bis )(?<!\bare )(?<!\bbe )(?<!\bbeen )(?<!\bbeing )\bused to\b",
        "The python steps used to run one by one.",
    ),
    (r"\bprevious (?:default|defaults|release|releases|recipe|layout)\b", "sliding windows (the previous default)"),
    (r"\bthe (?:old|earlier|previous) (?:default|recipe|layout)s?\b", "as the old default did"),
    (r"\bsince these runs\b", "Since these runs, the default is fused."),
    # a file that no longer lists a model, classes no longer answered: what an operation or a drift does, not history
    (r"\bno longer\b(?!\s+(?:uses|use|lists|list|answered)\b)", "The ensemble is no longer the default."),
    (r"\b(?:was|were) the default\b", "written when the ensemble was the default"),
    (r"\bnot the default yet\b|\bstill not the default\b", "It is still not the default."),
    (
        r"\bearlier (?:\w+ ){0,2}(?:run|runs|probe|probes|release|recipe|feed-forward|default|layout|spellings?)\b",
        "An earlier quiet run read 1.62x.",
    ),
    (r"\b(?:a|the) later (?:\w+ )?run\b", "A later levers run measured 1.04x."),
    (r"\bthe run before (?:it|this one)\b", "The run before it agreed."),
    (r"\blast first run\b", "the last first run took 24 minutes"),
    (r"\bbefore this (?:change|release|commit)\b", "slower before this change"),
    (r"\brelease before\b|\bfor one release\b|\bstill parses\b", "The spellings of the release before still work."),
    (r"\b(?:until|as of) (?:recently|now)\b", "Until recently the cut was sliding."),
    (
        r"\b(?:default|defaults|recipe|layout) now\b|\bnow the (?:\w+ )?(?:default|recipe|layout)\b",
        "sentence windows, the default now",
    ),
    (r"\b(?:is|are|were|was) (?:trained|measured|built|served) so now\b", "token_cls is trained so now"),
    (
        r"\b(?:repository|repositories|model|models|tokenizer|record|config)s? built before\b",
        "a repository built before the limits existed",
    ),
    (r"\bwhat replaced it\b|\b(?:was|were) (?:halved|renamed|replaced)\b", "the feed-forward was halved"),
)
PATTERNS = tuple(re.compile(regex, re.IGNORECASE) for regex, _ in HISTORY)

# Current facts that share words with the phrases above: none may be flagged.
CURRENT = (
    "The admin key is used to sign nothing; the certificate is used to encrypt gRPC.",
    "`apply` removes the models the file no longer lists.",
    "half the classes no longer answered",
    "runs the earlier stage again, or passes another",
    "each token's logits come from its window, ties to the earlier window",
    "every request waits behind the earlier ones",
    "keeps the previous model",
    "the previous repository stays intact",
    "requests in flight finish on the old config, new ones take N",
    "The default layout is fused on the python runtime.",
    "Every model must be built before the server starts.",
)


def history_phrases(line: str) -> list[str]:
    """The history phrases in one line, as written there; where two phrases overlap, the longer one."""
    spans = sorted((m.span() for pattern in PATTERNS for m in pattern.finditer(line)), key=lambda s: (s[0], -s[1]))
    kept: list[tuple[int, int]] = []
    for start, end in spans:
        if kept and start < kept[-1][1]:
            kept[-1] = (kept[-1][0], max(end, kept[-1][1]))
        else:
            kept.append((start, end))
    return [line[start:end] for start, end in kept]


@pytest.mark.parametrize(("regex", "example"), HISTORY, ids=[example for _, example in HISTORY])
def test_each_phrase_catches_its_example(regex, example):
    assert re.search(regex, example, re.IGNORECASE), f"{regex!r} misses its own example {example!r}"


@pytest.mark.parametrize("line", CURRENT)
def test_current_facts_are_not_flagged(line):
    assert history_phrases(line) == [], f"a current fact flagged as history: {line!r}"


def test_the_scan_reports_file_line_and_phrase(tmp_path):
    doc = tmp_path / "GUIDE.md"
    doc.write_text("# Guide\n\nThe fused layout is the default.\nIt was the previous default too.\n", encoding="utf-8")
    assert scan(doc, "GUIDE.md") == ["GUIDE.md:4: 'the previous default' in: It was the previous default too."]


def scan(path: Path, name: str) -> list[str]:
    found = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        for phrase in history_phrases(line):
            found.append(f"{name}:{number}: {phrase!r} in: {line.strip()}")
    return found


@pytest.mark.parametrize("doc", DOCS)
def test_docs_narrate_no_history(doc):
    found = scan(ROOT / doc, doc)
    assert not found, "history in the docs (state what is, or drop it):\n" + "\n".join(found)
