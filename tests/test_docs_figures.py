"""The README's headline figures are the ones their results files hold.

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
        rf"served on that run, accuracy {NUMBER}",
        "docs/first_runs.json",
        lambda d: d["runs"]["demo"]["scores"]["seq_cls"]["served"],
    ),
    Figure(
        "demo tagger's served entity F1",
        rf"accuracy [\d.]+ and entity F1 {NUMBER}, as their Paddle and ONNX models score",
        "docs/first_runs.json",
        lambda d: d["runs"]["demo"]["scores"]["token_cls"]["served"],
    ),
    Figure(
        "first run, seconds",
        rf"The first run .*? measured at {NUMBER} s \(",
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


def problems(text: str, figures=FIGURES) -> list[str]:
    """One line per figure the README lacks or shows other than its results file says."""
    text = " ".join(text.split())
    found = []
    for figure in figures:
        shown = re.findall(figure.pattern, text)
        if not shown:
            found.append(f"{figure.what}: not in README.md (pattern {figure.pattern!r})")
            continue
        results = json.loads((ROOT / figure.source).read_text(encoding="utf-8"))
        value = figure.compute(results)
        for figure_shown in shown:
            expected = rounded_as_shown(value, figure_shown)
            if figure_shown != expected:
                found.append(
                    f"{figure.what}: README.md shows {figure_shown}, "
                    f"{figure.source} gives {value} ({expected} as shown)"
                )
    return found


def test_readme_figures_are_their_results_files():
    found = problems(README.read_text(encoding="utf-8"))
    assert not found, "README.md and its results files disagree:\n" + "\n".join(found)


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
