"""What README.md and docs/CLIENTS.md show a client command printing is what the demo models print: every
`$ python clients/...` line of a ```console block runs, as a user runs it, against the demo repository on a real
tritonserver, and its output must match the lines shown under it.

Shown output is read back line by line: text (labels, entity types, offsets, counts) must be equal, whitespace
aside, and so must every decimal number (the demo models ship with the repository); a line `...` stands for any number
of lines left out."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ("README.md", "docs/CLIENTS.md")
# The clients of the demo models: a command of theirs in these docs prints an answer, so it must show it.
DEMO_CLIENTS = ("clients/seq_cls_grpc_client.py", "clients/token_cls_grpc_client.py")
# Options that point a client somewhere the demo repository and data do not cover (another model, a user's split).
ELSEWHERE = ("--model", "--data", "--report", "--grpc-url")
GAP = "..."

# The demo models ship with the repository (demo/): every machine serves the same weights, so what a client prints is
# what the docs show, decimals included.


@dataclass(frozen=True)
class Example:
    """One `$ command` of a ```console block and the output lines shown under it."""

    doc: str
    line: int  # of the command, 1-based
    argv: tuple[str, ...]
    shown: tuple[str, ...]

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"


def fenced_blocks(text: str) -> list[tuple[str, int, list[str]]]:
    """Each fenced block as (info string, line number of its first line, its lines)."""
    blocks, info, start, lines = [], None, 0, []
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            if info is None:
                info, start, lines = line[3:].strip(), number + 1, []
            else:
                blocks.append((info, start, lines))
                info = None
        elif info is not None:
            lines.append(line)
    assert info is None, f"a fenced block opened before line {start} is never closed"
    return blocks


def console_examples(text: str, doc: str) -> list[Example]:
    examples = []
    for info, start, lines in fenced_blocks(text):
        if info != "console":
            continue
        assert lines and lines[0].startswith("$ "), f"{doc}:{start}: a console block starts with a `$ ` command"
        for offset, line in enumerate(lines):
            if line.startswith("$ "):
                examples.append(Example(doc, start + offset, tuple(shlex.split(line[2:], comments=True)), ()))
            else:
                last = examples[-1]
                examples[-1] = Example(last.doc, last.line, last.argv, (*last.shown, line))
    return examples


def client_commands_without_output(text: str, doc: str) -> list[str]:
    """Demo client commands in fenced blocks that are not console blocks: they print an answer the doc hides."""
    found = []
    for info, start, lines in fenced_blocks(text):
        if info == "console":
            continue
        for offset, line in enumerate(lines):
            if not any(client in line for client in DEMO_CLIENTS):
                continue
            argv = shlex.split(line.lstrip("$ "), comments=True)
            if not any(option in argv for option in ELSEWHERE):
                found.append(f"{doc}:{start + offset}: {line.strip()}")
    return found


def line_matches(shown: str, printed: str) -> bool:
    return " ".join(shown.split()) == " ".join(printed.split())


def mismatch(example: Example, printed: list[str]) -> str | None:
    """None when `printed` is what the doc shows; else the first shown line that does not match, and why."""
    shown = list(example.shown)
    if not [line for line in shown if line != GAP]:
        return "the doc shows no output for a command that prints an answer"
    segments, run = [], []
    for line in shown:
        if line == GAP:
            segments.append(run)
            run = []
        else:
            run.append(line)
    segments.append(run)
    # segments[0] starts the output and segments[-1] ends it (either is empty after a leading or trailing `...`);
    # the ones between may sit anywhere after the previous one
    pos = 0
    for k, segment in enumerate(segments):
        first, last = k == 0, k == len(segments) - 1
        tail = len(printed) - len(segment)
        if not segment:
            continue
        if first and last:
            candidates = [0] if tail == 0 else []
        elif last:
            candidates = [tail] if tail >= pos else []
        elif first:
            candidates = [0]
        else:
            candidates = range(pos, tail + 1)
        for at in candidates:
            window = printed[at : at + len(segment)]
            if len(window) == len(segment) and all(line_matches(want, got) for want, got in zip(segment, window)):
                pos = at + len(segment)
                break
        else:
            where = "the whole output" if first and last else "the start" if first else "the end" if last else "next"
            problem = f"these shown lines are not {where} of what was printed:\n  " + "\n  ".join(segment)
            if len(candidates) == 1:  # anchored: name the first line that differs
                at = candidates[0]
                for want, got in zip(segment, printed[at:]):
                    if not line_matches(want, got):
                        return f"{problem}\nfirst difference:\n  shown: {want}\n  got: {got}"
            return problem
    return None


EXAMPLES = [e for doc in DOCS for e in console_examples((ROOT / doc).read_text(encoding="utf-8"), doc)]


def test_docs_show_the_output_of_every_demo_client_command():
    hidden = [line for doc in DOCS for line in client_commands_without_output((ROOT / doc).read_text("utf-8"), doc)]
    assert not hidden, "show what these print in a ```console block:\n" + "\n".join(hidden)
    shown = {(e.argv[1], "--text" in e.argv) for e in EXAMPLES}
    # the three a newcomer runs first: titles classified, the test split scored, entities found
    for expected in [(DEMO_CLIENTS[0], True), (DEMO_CLIENTS[0], False), (DEMO_CLIENTS[1], True)]:
        assert expected in shown, f"no console example of {expected[0]} {'--text' if expected[1] else ''}"


def test_labels_entities_and_decimals_compare_exactly():
    """What the docs show, printed back unchanged, matches; a changed label or entity, a probability or score off in
    its last decimal, or a line more does not."""
    for example in EXAMPLES:
        if GAP not in example.shown:
            assert mismatch(example, list(example.shown)) is None, example.id
            assert mismatch(example, [*example.shown, "[]"]) is not None, example.id
    titles = next(e for e in EXAMPLES if e.argv[1] == DEMO_CLIENTS[0] and "--text" in e.argv)
    label, probability, text = titles.shown[0].split(None, 2)
    for answer in (
        f"{'game' if label != 'game' else 'sports'}\t{probability}\t{text}",
        f"{label}\t{float(probability) - 0.0001:.4f}\t{text}",
    ):
        assert mismatch(titles, [answer, *titles.shown[1:]]) is not None, answer
    entities = next(e for e in EXAMPLES if e.argv[1] == DEMO_CLIENTS[1] and "--text" in e.argv)
    other_type = {"PER": "LOC", "LOC": "ORG", "ORG": "PER"}
    changed = 0
    for i, line in enumerate(entities.shown):
        if re.search(r'"(type|start|end)"', line):
            wrong = re.sub(r'"(PER|LOC|ORG)"', lambda m: f'"{other_type[m[1]]}"', line)
            wrong = re.sub(r"(\d+),", lambda m: f"{int(m[1]) + 1},", wrong)
            assert mismatch(entities, [*entities.shown[:i], wrong, *entities.shown[i + 1 :]]) is not None, wrong
            changed += 1
    assert changed, f"{entities.id}: no entity shown"
    split = next(e for e in EXAMPLES if e.argv[1] == DEMO_CLIENTS[0] and "--text" not in e.argv)
    metric, value, n = split.shown[-1].split()
    before = [line if line != GAP else "" for line in split.shown[:-1]]
    assert mismatch(split, [*before, f"{metric} {float(value) + 0.0001:.4f} {n}"]) is not None


@pytest.fixture(scope="module")
def printed(server):
    """Each distinct command's stdout lines, run once (README and docs/CLIENTS.md show some of the same ones)."""
    cache: dict[tuple[str, ...], list[str]] = {}

    def run(argv: tuple[str, ...]) -> list[str]:
        if argv not in cache:
            assert argv[0] == "python" and argv[1] in DEMO_CLIENTS, f"not a demo client command: {shlex.join(argv)}"
            assert not any(option in argv for option in ELSEWHERE), "the test adds --grpc-url; no other target applies"
            # the venv's python stands for `python` after `source .venv/bin/activate`; UTF-8 whatever the locale,
            # as the texts are Chinese
            env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
            proc = subprocess.run(
                [sys.executable, *argv[1:], "--grpc-url", server.grpc_url],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                encoding="utf-8",
                timeout=600,
            )
            assert proc.returncode == 0, f"{shlex.join(argv)} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
            cache[argv] = proc.stdout.splitlines()
        return cache[argv]

    return run


@pytest.mark.integration
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.id)
def test_shown_output_is_what_the_demo_models_print(example, printed):
    lines = printed(example.argv)
    problem = mismatch(example, lines)
    if problem is not None:  # pytest.fail: the message alone, not the assertion's repr of it again
        pytest.fail(
            f"{example.id}: $ {shlex.join(example.argv)}\n{problem}\n"
            "printed:\n  " + "\n  ".join(lines) + "\nshown:\n  " + "\n  ".join(example.shown),
            pytrace=False,
        )
