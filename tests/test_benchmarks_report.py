"""docs/BENCHMARKS.md is exactly what `python -m benchmarks.page` writes from the committed results files (docs/*.json),
so that a results file and the page cannot drift apart: a benchmark run is followed by `python -m benchmarks.page`.
Nothing is measured here; the page is rendered from the files, in well under a second.

Around that: every results file in docs/ has a home (a section of the page, or another page named at its end), every
link other pages make into the page finds its heading, a changed figure in a results file changes the page, and every
command the page shows is one its program accepts as written, each flag by its full name."""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
from pathlib import Path

import pytest

from benchmarks import page
from benchmarks.cli import MODES
from benchmarks.cli import build_parser as benchmarks_parser
from benchmarks.page_parts import Results, anchor, shown_command, wrap
from ernie_deploy.cli import build_parser as ernie_deploy_parser

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGE = DOCS / "BENCHMARKS.md"


def test_the_page_is_what_the_results_files_give():
    diff = page.check(DOCS, PAGE)
    assert not diff, (
        "docs/BENCHMARKS.md is not what docs/*.json give: run `python -m benchmarks.page` (after a benchmark run, or "
        "a change to benchmarks/page*.py), or edit the generator rather than the page:\n" + "\n".join(diff[:80])
    )


def test_every_results_file_in_docs_has_a_home():
    results = Results(DOCS)
    page.render(results)
    homeless = sorted(
        p.name
        for p in DOCS.glob("*.json")
        if p.name not in results.read and p.name not in page.ELSEWHERE and p.name not in page.SUPERSEDED
    )
    assert not homeless, f"results files no section reports and no other page is named for: {homeless}"


def test_links_into_the_page_find_their_headings():
    headings = {anchor(h) for h in re.findall(r"^#+ (.*)$", page.render_page(DOCS), re.MULTILINE)}
    broken = []
    for doc in (ROOT / "README.md", *sorted(DOCS.glob("*.md"))):
        for target in re.findall(r"BENCHMARKS\.md#([\w-]+)", doc.read_text(encoding="utf-8")):
            if target not in headings:
                broken.append(f"{doc.relative_to(ROOT)}: BENCHMARKS.md#{target}")
    text = PAGE.read_text(encoding="utf-8")
    broken += [f"BENCHMARKS.md: #{a}" for a in re.findall(r"\]\(#([\w-]+)\)", text) if a not in headings]
    assert not broken, "links to no heading of the page:\n" + "\n".join(broken)


def test_a_changed_figure_in_a_results_file_fails_the_check(tmp_path):
    docs = tmp_path / "docs"
    shutil.copytree(DOCS, docs, ignore=shutil.ignore_patterns("*.png"))
    assert page.check(docs) == []
    cache = json.loads((docs / "cache.json").read_text(encoding="utf-8"))
    cache["rows"][0]["texts_per_s"] += 100.0
    (docs / "cache.json").write_text(json.dumps(cache), encoding="utf-8")
    diff = page.check(docs)
    assert any(line.startswith("+") and f"{cache['rows'][0]['texts_per_s']:.1f}" in line for line in diff)
    assert page.main(["--docs", str(docs), "--check"]) == 1
    assert page.main(["--docs", str(docs)]) == 0
    assert page.main(["--docs", str(docs), "--check"]) == 0


def test_a_recorded_command_is_shown_as_it_is_typed():
    assert shown_command("ernie-deploy bench --levers --task seq_cls --out /tmp/lev1") == (
        "bash scripts/bench.sh levers --task seq_cls --out FOLDER",
        True,
    )
    assert shown_command("__main__.py gateway --task seq_cls --out docs") == (
        "bash scripts/bench.sh gateway --task seq_cls --out docs",
        False,
    )
    assert shown_command("uie.py") == ("python -m benchmarks.uie", False)
    assert shown_command("gateway_profile.py --requests 1500 --out /tmp/p.json") == (
        "python -m benchmarks.gateway_profile --requests 1500 --out FILE",
        True,
    )


def test_wrapped_prose_keeps_code_spans_and_items_whole():
    text = wrap("- a bullet whose code span `Cast(x) * -1e4 + 0` falls at the break, then " + "word " * 30, width=30)
    lines = text.splitlines()
    assert lines[0].startswith("- ") and all(line.startswith("  ") for line in lines[1:])
    assert any("`Cast(x) * -1e4 + 0`" in line for line in lines)
    assert wrap("one\n\n- two\n- three", width=30) == "one\n\n- two\n- three"


# -- the commands the page shows ---------------------------------------------------------------------------------


def _commands(text: str) -> list[str]:
    """Each command of bash scripts/bench.sh, python -m benchmarks... or ernie-deploy the page shows: a line of a
    fenced block (continuations joined) or an inline code span."""
    found, joined = [], ""
    fenced = False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            joined += line.rstrip("\\").strip() + " "
            if not line.endswith("\\"):
                found.append(joined.strip())
                joined = ""
    found += [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", re.sub(r"```.*?```", "", text, flags=re.S))]
    starts = ("bash scripts/bench.sh", "python -m benchmarks", "ernie-deploy ")
    return [c for c in dict.fromkeys(found) if c.startswith(starts)]


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser | None:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices.get(name)


def _full_flags(parser: argparse.ArgumentParser, words: list[str]) -> list[str]:
    return [w for w in words if w.startswith("--") and w.split("=", 1)[0] not in parser._option_string_actions]


COMMANDS = _commands(PAGE.read_text(encoding="utf-8"))


def test_the_page_shows_commands_of_each_program():
    assert any(c.startswith("bash scripts/bench.sh") for c in COMMANDS)
    assert any(c.startswith("python -m benchmarks.") for c in COMMANDS)
    assert any(c.startswith("ernie-deploy ") for c in COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_the_page_shows_is_accepted_as_written(command):
    words = shlex.split(command, comments=True)
    if words[:2] == ["bash", "scripts/bench.sh"] or words[:3] == ["python", "-m", "benchmarks"]:
        rest = words[2:] if words[0] == "bash" else words[3:]
        args = rest if rest[:1] and rest[0] in MODES else ["run", *rest]
        parser = _subparser(benchmarks_parser(), args[0])
        assert not _full_flags(parser, args[1:]), f"{command}: flags not spelled in full"
        parser.parse_args(args[1:])  # argparse exits on a bad flag or value
    elif words[:2] == ["python", "-m"]:
        # these modules build their parser inside main(): each flag must be one the module's source declares
        source = (ROOT / (words[2].replace(".", "/") + ".py")).read_text(encoding="utf-8")
        flags = [w.split("=", 1)[0] for w in words[3:] if w.startswith("--")]
        assert all(f'"{flag}"' in source for flag in flags), f"{command}: a flag {words[2]} does not declare"
    else:
        parser = _subparser(ernie_deploy_parser(), words[1])
        assert parser is not None, f"{command}: no such command"
        assert not _full_flags(parser, words[2:]), f"{command}: flags not spelled in full"
