"""The parts every section of docs/BENCHMARKS.md is made of (benchmarks/page.py): the results files read, each
run's command as it is typed today, where it ran and under what load, Markdown tables and a heading's anchor."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

# The benchmarks that are a module of their own (`python -m benchmarks.NAME`) rather than a subcommand of
# `python -m benchmarks`: a results file names them by their file.
MODULES = ("uie", "embed", "refused_bodies", "gateway_profile", "shadow_cost", "lone_request")
# The modes a results file may name as `ernie-deploy bench` flags (the spelling of the runs that wrote it), each the
# subcommand of `bash scripts/bench.sh` that makes the same file.
MODE_FLAGS = {"--levers": "levers", "--overload": "overload", "--cache": "cache", "--input-cost": "input-cost"}


class Results:
    """The results files of one folder (docs/), each read once. `accessed` lists every file asked for, in order, so
    that the page can say which files feed which section."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.accessed: list[str] = []
        self._files: dict[str, dict] = {}

    def __call__(self, name: str) -> dict:
        self.accessed.append(name)
        if name not in self._files:
            self._files[name] = json.loads((self.folder / name).read_text(encoding="utf-8"))
        return self._files[name]

    @property
    def read(self) -> list[str]:
        return sorted(self._files)


def shown_command(recorded: str) -> tuple[str, bool]:
    """A results file's `command` (the process's own argv, which names the module or an old spelling of the mode)
    as a reader types it today to make that file again, and whether its `--out` was a scratch folder (then shown
    as FOLDER or FILE: the file was copied into docs/ under its name there)."""
    words = shlex.split(recorded)
    head, rest = words[0], words[1:]
    if head == "ernie-deploy" and rest[:1] == ["bench"]:
        # `ernie-deploy bench --levers ...`: the mode as a flag, which `python -m benchmarks` takes as a subcommand
        flags = [w for w in rest[1:] if w in MODE_FLAGS]
        rest = [MODE_FLAGS[flags[0]], *(w for w in rest[1:] if w not in flags)] if flags else rest[1:]
        shown = ["bash", "scripts/bench.sh", *rest]
    elif head == "__main__.py":
        shown = ["bash", "scripts/bench.sh", *rest]
    elif head.removesuffix(".py") in MODULES:
        shown = ["python", "-m", f"benchmarks.{head.removesuffix('.py')}", *rest]
    else:
        shown = words
    scratch = False
    for i, word in enumerate(shown[:-1]):
        if word == "--out" and not shown[i + 1].startswith("docs"):
            shown[i + 1] = "FILE" if shown[i + 1].endswith(".json") else "FOLDER"
            scratch = True
    return shlex.join(shown), scratch


def _load(values) -> str:
    return " / ".join(f"{v:.2f}" for v in values)


def run_lines(
    record: dict,
    command: str | None = None,
    *,
    end: list | None = None,
    during: list | None = None,
    kept_as: str = "",
) -> list[str]:
    """A list: the command that made the results file, when it ran, the machine and its load as the file records
    them (`end`: the load average at the end; `during`: each cell's, given as the 1-minute range)."""
    if command is None:
        command, scratch = shown_command(record["command"])
    else:
        scratch = False
    where = f" (run with its `--out` elsewhere; the file is docs/{kept_as})" if scratch and kept_as else ""
    lines = [f"- command: `{command}`{where}"]
    if record.get("date"):
        lines.append(f"- run: {record['date']}")
    m = record.get("machine")
    if m:
        load = f"load average (1 / 5 / 15 min) at the start {_load(m['loadavg_start'])}"
        if end:
            load += f", at the end {_load(end)}"
        if during:
            first = [values[0] for values in during]
            load += f"; 1-minute load average during the cells {min(first):.2f}-{max(first):.2f}"
        lines.append(
            f"- machine: {m['cpu']}, {m['cores']} cores ({m['usable_cores']} usable), {m['memory_gib']} GiB, "
            f"Python {m['python']}; {load}"
        )
    return lines


def table(head: list[str], rows: list[list], align: str) -> list[str]:
    """A Markdown table; `align` holds one letter a column: l (text) or r (numbers)."""
    marks = {"l": "---", "r": "---:"}
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(marks[a] for a in align) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return lines


def anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def ratio(value: float, digits: int = 2) -> str:
    return f"{value:.{digits}f}×"


def signed(value: float, digits: int = 2, unit: str = " ms") -> str:
    return f"{value:+.{digits}f}{unit}"


def below_zero(values: list[float]) -> str:
    """What a difference below zero between a served cell and an in-process one means, when there is one."""
    if min(values) >= 0:
        return ""
    return " (below zero: the two cells ran at different moments, and the host's load moved between them)"


def spread(values: list[float], fmt=lambda v: f"{v:.2f}", sep: str = " to ") -> str:
    """ "a to b" (lowest to highest), or the one value."""
    low, high = min(values), max(values)
    return fmt(low) if fmt(low) == fmt(high) else f"{fmt(low)}{sep}{fmt(high)}"


# A word Markdown would read, at the start of a line, as a list item, a quote, a heading (or its underline) or a
# table row.
_OPENS_BLOCK = re.compile(r"^(?:[*+>#|]|-+|=+|\d+[.)])$")


def _tokens(text: str) -> list[str]:
    """The words of `text`, a code span's words kept together: a command shown in one is copied from one line."""
    tokens: list[str] = []
    inside = False
    for word in text.split():
        if inside:
            tokens[-1] += " " + word
        else:
            tokens.append(word)
        inside ^= word.count("`") % 2 == 1
    return tokens


def wrap(text: str, width: int = 120) -> str:
    """Prose reflowed to `width`: its paragraphs and "- " items kept, each item's lines indented under it, a code
    span on one line, and no line made to start with a word that would open another block."""
    out = []
    for paragraph in text.split("\n\n"):
        items = re.split(r"\n(?=- )", paragraph)
        lines = []
        for item in items:
            words = _tokens(item)
            indent = "  " if words[:1] == ["-"] else ""
            line = ""
            for word in words:
                if line and len(line) + 1 + len(word) > width and not _OPENS_BLOCK.match(word):
                    lines.append(line)
                    line = indent + word
                else:
                    line = f"{line} {word}" if line else word
            lines.append(line)
        out.append("\n".join(lines))
    return "\n\n".join(out)
