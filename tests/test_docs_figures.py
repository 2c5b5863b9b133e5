"""The docs' figures are the ones their results files hold: README's headline figures, found wherever a doc shows
them, and every sentence of any doc that gives a demo model's score.

Each figure the README shows is found by a pattern anchored on the words around it, and compared with the value
computed from its results file (docs/first_runs.json, docs/bench.json), rounded as the README shows it: as many
decimals as the README writes, thousands separated by commas. A figure that is missing from the README, or that
differs from its file, fails the test with both values and the file to read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# Every page a reader arrives at: README and every file under docs/.
DOCS = (README, *sorted((ROOT / "docs").rglob("*.md")))
NUMBER = r"(\d[\d,]*(?:\.\d+)?)"


def _ratio(task: str, key: str) -> Callable[[dict], float]:
    """A ratio `ernie-deploy bench` wrote (its `ratios` list: key, task, value)."""

    def value(results: dict) -> float:
        found = [r["value"] for r in results["ratios"] if r["key"] == key and r["task"] == task]
        assert len(found) == 1, f"docs/bench.json holds {len(found)} ratios {key} of {task}, not one"
        return found[0]

    return value


@dataclass(frozen=True)
class Figure:
    what: str
    pattern: str  # matched on the README with its whitespace collapsed; NUMBER marks the figure
    source: str  # the results file, relative to the repository root
    compute: Callable[[dict], float]


FIGURES = (
    Figure(
        "demo classifier's served accuracy",
        rf"served, accuracy {NUMBER}",
        "demo/seq_cls/manifest.json",
        lambda d: d["scores"]["test"],
    ),
    Figure(
        "demo tagger's served entity F1",
        rf"accuracy [\d.]+ and entity F1 {NUMBER}, as their Paddle and ONNX models score",
        "demo/token_cls/manifest.json",
        lambda d: d["scores"]["test"],
    ),
    Figure(
        "first run, seconds",
        rf"the first run trains nothing: measured at {NUMBER} s \(",
        "docs/first_runs.json",
        lambda d: d["runs"]["demo"]["total_s"],
    ),
    Figure(
        "first run, minutes",
        rf"measured at [\d,]+ s \({NUMBER} min\) on a clean clone",
        "docs/first_runs.json",
        lambda d: d["runs"]["demo"]["total_s"] / 60,
    ),
    Figure(
        "a checkpoint of one's own to its first served answer, seconds",
        rf"reached its first served answer in {NUMBER} s, install included",
        "docs/first_runs.json",
        lambda d: d["runs"]["own_checkpoint"]["total_s"],
    ),
    Figure(
        "test suite, seconds",
        rf"it took {NUMBER} s \(about [\d.]+ min\)",
        "docs/first_runs.json",
        lambda d: d["test_suite"]["total_s"],
    ),
    Figure(
        "test suite, minutes",
        rf"it took [\d,]+ s \(about {NUMBER} min\)",
        "docs/first_runs.json",
        lambda d: d["test_suite"]["total_s"] / 60,
    ),
    Figure(
        "served / SimpleServing throughput, demo classifier",
        rf"served {NUMBER}× the throughput of PaddleNLP's SimpleServing",
        "docs/bench.json",
        _ratio("seq_cls", "served_vs_peer"),
    ),
    *(
        Figure(
            f"served / in-process limit throughput, {size}",
            rf"{NUMBER}× \({size}\)",
            "docs/bench.json",
            _ratio(f"ernie_seqcls_{size}", "served_vs_limit"),
        )
        for size in ("nano", "mini", "medium", "base")
    ),
)


def rounded_as_shown(value: float, shown: str) -> str:
    """`value` written as `shown` is: its number of decimals, thousands separated by commas."""
    decimals = len(shown.split(".")[1]) if "." in shown else 0
    return f"{value:,.{decimals}f}"


def problems(text: str, figures=FIGURES, doc: str = "README.md", required: bool = True) -> list[str]:
    """One line per figure the doc shows other than its results file says, or, where `required`, lacks."""
    text = " ".join(text.split())
    found = []
    for figure in figures:
        shown = re.findall(figure.pattern, text)
        if not shown:
            if required:
                found.append(f"{figure.what}: not in {doc} (pattern {figure.pattern!r})")
            continue
        results = json.loads((ROOT / figure.source).read_text(encoding="utf-8"))
        value = figure.compute(results)
        for figure_shown in shown:
            expected = rounded_as_shown(value, figure_shown)
            if figure_shown != expected:
                found.append(
                    f"{figure.what}: {doc} shows {figure_shown}, {figure.source} gives {value} ({expected} as shown)"
                )
    return found


def test_readme_figures_are_their_results_files_wherever_a_doc_shows_them():
    found = []
    for doc in DOCS:
        found += problems(doc.read_text(encoding="utf-8"), doc=str(doc.relative_to(ROOT)), required=doc == README)
    assert not found, "the docs and their results files disagree:\n" + "\n".join(found)


# A sentence that names a demo model and gives its score, `accuracy 0.837` or `entity F1 0.7712` (also `F1 of`,
# `accuracy:`), gives the shipped model's (demo/<task>/manifest.json), to as many decimals as it shows.
DEMO_SCORE = re.compile(r"\b(accuracy|entity F1)(?: of|:)? (0\.\d{3,4})\b")
DEMO_TASK = {"accuracy": "seq_cls", "entity F1": "token_cls"}
DEMO_WORDS = re.compile(r"\bdemo (classifier|tagger|NER model|models?)\b")


def demo_score_problems(text: str, doc: str) -> list[str]:
    from ernie_deploy.pipeline.ship import TABLE_BEGIN, TABLE_END

    # the table of the shipped models is rendered from their manifests (tests/test_shipped.py holds it to them)
    text = re.sub(re.escape(TABLE_BEGIN) + ".*?" + re.escape(TABLE_END), "", text, flags=re.S)
    found = []
    for sentence in re.split(r"(?<=[.:;])\s+(?=[A-Z`(])", " ".join(text.split())):
        if not DEMO_WORDS.search(sentence):
            continue
        for metric, shown in DEMO_SCORE.findall(sentence):
            source = f"demo/{DEMO_TASK[metric]}/manifest.json"
            value = json.loads((ROOT / source).read_text(encoding="utf-8"))["scores"]["test"]
            if shown != rounded_as_shown(value, shown):
                found.append(f"{doc}: {metric} {shown} where {source} gives {value}: {sentence[:160]}")
    return found


def test_every_doc_gives_the_demo_models_shipped_scores():
    found = [line for doc in DOCS for line in demo_score_problems(doc.read_text("utf-8"), str(doc.relative_to(ROOT)))]
    assert not found, "a demo model's score that is not its manifest's:\n" + "\n".join(found)


def test_a_stale_demo_score_is_caught():
    assert demo_score_problems("The demo tagger reads them at entity F1 0.1234 in windows.", "x.md")
    assert demo_score_problems("Served by the demo classifier: accuracy 0.101, as shown.", "x.md")
    assert not demo_score_problems("A tagger of another recipe reached entity F1 0.1234.", "x.md")


@pytest.mark.parametrize("figure", FIGURES, ids=lambda f: f.what)
def test_a_changed_or_missing_figure_is_caught(figure):
    """Each pattern holds the figure itself: changing that number in the README, or dropping the words around it,
    is a problem the test reports."""
    text = " ".join(README.read_text(encoding="utf-8").split())
    match = re.search(figure.pattern, text)
    assert match, f"{figure.what}: not in README.md"
    start, end = match.span(1)
    last = text[end - 1]
    changed = text[: end - 1] + ("1" if last != "1" else "2") + text[end:]
    assert any(figure.what in line for line in problems(changed, [figure])), figure.what
    assert problems(text[:start] + text[end:], [figure]), figure.what


def test_rounding_follows_what_the_readme_shows():
    assert rounded_as_shown(0.5, "0.5000") == "0.5000"
    assert rounded_as_shown(12345, "12,345") == "12,345"
    assert rounded_as_shown(100 / 60, "1.7") == "1.7"
    assert rounded_as_shown(100 / 60, "2") == "2"
    assert rounded_as_shown(0.125, "0.13") != "0.13"  # binary 0.125 rounds half to even: 0.12
