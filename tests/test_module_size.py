"""A module is read whole: none in the package or the benchmarks runs past 400 lines. One that grows past it is split
by concern, each part named for what it holds."""

from __future__ import annotations

from .conftest import ROOT

LIMIT = 400
FOLDERS = ("ernie_deploy", "benchmarks")


def test_no_module_is_over_the_limit():
    over = {
        str(path.relative_to(ROOT)): lines
        for folder in FOLDERS
        for path in sorted((ROOT / folder).rglob("*.py"))
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > LIMIT
    }
    assert not over, f"modules over {LIMIT} lines (split each by concern): {over}"
