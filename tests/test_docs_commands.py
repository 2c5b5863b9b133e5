"""Every command README.md and docs/*.md show parses with the current command lines: `ernie-deploy ...` with
`ernie_deploy.cli.build_parser()`, `python clients/X.py ...` with the client's own parser, `scripts/X.sh ...` and
`bash scripts/X.sh ...` by the script itself run with ERNIE_DEPLOY_PARSE_ONLY=1 (it parses its arguments as a run
would, then exits 0 when they are fine or 2 with its message, before making .venv, installing, downloading or writing
anything), `python -m benchmarks.X ...` (a module of this project) with the parser its main() makes, `tritonserver ...`
as the environment's tritonserver reads Triton's options (server/launcher.py: the names and arities of the wheel's
server's --help, which tests/test_launcher.py holds to the binary's). Nothing is run beyond that: no server, no model.
No parser takes an abbreviated flag (allow_abbrev=False), so none passes here.

What is read as a command:
- a line of a fenced block of shell (no info string, bash, sh, shell, console; in a console block only the lines
  after a `$ ` prompt), and every inline code span, that starts with `ernie-deploy `, `tritonserver `,
  `scripts/X.sh`, `bash scripts/X.sh`, `python clients/X.py` (or python3), `clients/X.py` or `python -m M` where M
  is a module of benchmarks/ or ernie_deploy/ (not a placeholder: `python -m benchmarks.NAME`);
- every inline code span that starts with a command of ernie-deploy (`build --layout ensemble`, `serve`), read as
  `ernie-deploy build --layout ensemble`;
- every inline code span that starts with a flag (`--fused`, `--layout ensemble`, `-r DIR`): flags alone, which must
  be those of some command that takes them as written: ernie-deploy's, a client's, a script's, `python -m
  benchmarks`', tritonserver's, or those of a module of this project or a program of another (FOREIGN_FLAGS) that
  the span's section names (see check_flags);
- a word `a|b|c` in a span (`--ort-spinning off|run|always`) stands for each of them, each checked;
- split as the shell splits it: `# comments` dropped, lines ending in `\\` joined, environment assignments before the
  command dropped, each command of `a && b`, `a; b`, `a | b` and `$(...)` taken alone, redirections (`> file`,
  `2>&1`) cut off; `[--flag VALUE]` (an optional part) read as written inside the brackets;
- not read: scripts whose name starts with `_` (sourced by the others, never run), a span of `ernie-deploy` or
  `tritonserver` alone (the program's name), and a span whose second word ends in `:`, which quotes what a command
  printed (`ernie-deploy check: deprecated: ...`).

A placeholder stands for a value: a word of capitals, digits and underscores (NAME, N, T, HEX, BENCH_JSON), `<hex>`,
`...`, or a word holding `...` or starting with `/path/to/`. It is given a value the argument takes, read from the
parser (its first choice; 1 for an int, 0.5 for a float) unless it is itself one of the argument's choices; a
placeholder the parser knows no type for stays as written (any string does). A `...` that is no option's value
(`--sweep 128 ...`, `build --task T ...`) stands for more arguments and is dropped. Scripts get the value that
ernie-deploy's option of the same name takes (`convert.sh --task T`), `python -m benchmarks`'s for bench.sh and
`ernie-deploy serve`'s for serve.sh's flags.

A command fails when argparse refuses it (an unknown flag, a bad choice or value), when it prints a `deprecated:`
line (an old spelling: a positional repository or model, `--name`, ...), when it names a command that has moved
(`ernie-deploy long-texts`, `ernie-deploy bench --levers`), when its script or client does not exist or its script
has no parse-only mode, or when the script exits non-zero. A command in a fenced block must be whole. An inline span
is often part of a sentence that gives the rest ("`ernie-deploy apply` reads the file ..."): a span of ernie-deploy or
a client is checked for unknown flags, bad choices and values, old spellings and moved commands, but not for missing
required arguments, and a flag that ends it takes its value from the prose around it. A script checks its own
arguments, so a span of one must be whole. An old spelling in a span passes where the span's paragraph says
`deprecated` (it lists the old spellings): it fails once the command line no longer takes it.
"""

from __future__ import annotations

import argparse
import importlib
import io
import os
import re
import runpy
import shlex
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from unittest import mock

import pytest

from ernie_deploy.cli import build_parser
from ernie_deploy.cli.parse_only import ENV as PARSE_ONLY

ROOT = Path(__file__).resolve().parents[1]
DOCS = ("README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")))
SHELL_BLOCKS = ("", "bash", "sh", "shell", "console")
SCRIPT = re.compile(r"^(?:\./)?scripts/(\w+)\.sh$")
CLIENT = re.compile(r"^(?:\./)?clients/(\w+)\.py$")
PYTHONS = ("python", "python3")
SHELLS = ("bash", "sh")
SEPARATORS = ("|", "||", "&&", ";", "&", "|&")
REDIRECT = re.compile(r"^\d*(?:>>?|<|>&|&>)")
ASSIGNMENT = re.compile(r"^[A-Za-z_]\w*=")
SUBSTITUTION = re.compile(r"\$\(([^()]+)\)")
FENCE = re.compile(r"^(`{3,}|~{3,})(.*)$")
PLACEHOLDER = re.compile(r"^(?:(?=[A-Z0-9_]*[A-Z])[A-Z0-9_]+|<[^<>]+>|\.\.\.)$")
MORE = "..."
ALTERNATIVES = re.compile(r"^[^|\s]+(?:\|[^|\s]+)+$")  # `argmax|constrained` in a span: one of these
SCRIPT_TIMEOUT_S = 30
TRITONSERVER = "tritonserver"
FLAGS = "(flags)"  # the program of a span of flags alone: some command that takes them (check_flags)
MODULE = "python -m "  # the program of `python -m benchmarks.X ...`: a module of this project
BENCHMARKS = MODULE + "benchmarks"  # what bench.sh runs
OLD_SPELLING = "an old spelling: "
# Programs of other projects whose flags the docs name in prose, with those flags: a span of them alone passes where
# its section names the program (`docker run` takes `--shm-size=1g`). perf_analyzer's are those
# ernie_deploy/bench/perf_analyzer.py passes and --max-threads; `--ssl-grpc-*` in a span stands for those that start so.
FOREIGN_FLAGS = {
    "docker": ("--build-arg", "--shm-size"),
    "perf_analyzer": (
        "--concurrency-range",
        "--max-threads",
        "--request-rate-range",
        "--ssl-grpc-use-ssl",
        "--ssl-grpc-root-certifications-file",
        "--ssl-grpc-private-key-file",
        "--ssl-grpc-certificate-chain-file",
    ),
}


@dataclass(frozen=True)
class Command:
    """One command a doc shows: where, as written, and its words (program first) with the shell's syntax gone."""

    doc: str
    line: int  # 1-based, of the command's first line
    text: str
    argv: tuple[str, ...]
    inline: bool  # an inline code span (else a line of a fenced block)
    paragraph: str = ""  # an inline span's paragraph (it may say that an old spelling is one)
    section: str = ""  # an inline span's section, from its heading to the next (it may name the program of flags)

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"


# --------------------------------------------------------------------------------------------------
# Reading the commands out of Markdown


def _starts_a_command(text: str) -> bool:
    """Whether shell text starts (after a prompt and environment assignments) with a command this test reads."""
    words = text.strip().removeprefix("$ ").split()
    while words and ASSIGNMENT.match(words[0]):
        words = words[1:]
    if words[:1] and words[0] in PYTHONS and words[1:2] == ["-m"]:
        return _project_module(words[2] if len(words) > 2 else "")
    if words[:1] and words[0] in (*PYTHONS, *SHELLS):
        words = words[1:]
    return bool(words) and (
        words[0] in ("ernie-deploy", TRITONSERVER, FLAGS) or bool(SCRIPT.match(words[0]) or CLIENT.match(words[0]))
    )


def _project_module(name: str) -> bool:
    """Whether `python -m name` runs a module of this project (`benchmarks.uie`; not `benchmarks.NAME`)."""
    parts = name.split(".")
    return parts[0] in ("benchmarks", "ernie_deploy") and not any(not p or PLACEHOLDER.match(p) for p in parts)


@cache
def _ernie_deploy_commands() -> frozenset[str]:
    return frozenset(_subcommands(build_parser()))


def _as_command(span: str) -> str:
    """An inline span as the shell text of the command it shows: one that starts with a command of ernie-deploy
    (`build --layout ensemble`) is `ernie-deploy build --layout ensemble`, one that starts with a flag is flags alone
    (FLAGS), any other is as written."""
    first = (span.split() or [""])[0]
    if first in _ernie_deploy_commands():
        return f"ernie-deploy {span}"
    if _looks_like_option(first):
        return f"{FLAGS} {span}"
    return span


def _program(words: list[str]) -> tuple[str, ...] | None:
    """The command these words run, as (program, *arguments), or None when it is none this test reads."""
    while words and ASSIGNMENT.match(words[0]):
        words = words[1:]
    if not words:
        return None
    if words[0] in ("ernie-deploy", TRITONSERVER, FLAGS):
        if len(words) > 1 and words[1].endswith(":"):
            return None  # what a command printed, quoted: `ernie-deploy check: error: ...`
        return tuple(words)
    if words[0] in PYTHONS and words[1:2] == ["-m"]:
        module = words[2] if len(words) > 2 else ""
        return (MODULE + module, *words[3:]) if _project_module(module) else None
    if words[0] in (*PYTHONS, *SHELLS) and len(words) > 1:
        interpreter, words = words[0], words[1:]
        if (interpreter in PYTHONS) != bool(CLIENT.match(words[0])):
            return None
    script = SCRIPT.match(words[0])
    if script and not script.group(1).startswith("_"):
        return ("scripts/" + script.group(1) + ".sh", *words[1:])
    client = CLIENT.match(words[0])
    if client:
        return ("clients/" + client.group(1) + ".py", *words[1:])
    return None


def _unbracket(words: list[str]) -> list[str]:
    """`[--flag VALUE]`, an optional part of a command, read as written inside the brackets."""
    out, inside = [], False
    for word in words:
        if word.startswith("[-"):
            word, inside = word[1:], True
        if inside and word.endswith("]"):
            word, inside = word[:-1], False
        out.append(word)
    return out


def shell_commands(text: str) -> list[tuple[str, ...]]:
    """The commands this test reads in one line of shell (continuations joined), each as (program, *arguments).
    Raises ValueError when the shell could not split it."""
    found = []
    for inner in SUBSTITUTION.findall(text):
        found += shell_commands(inner)
    words: list[str] = []
    for word in shlex.split(text.strip().removeprefix("$ "), comments=True):
        if word not in SEPARATORS and word.endswith(";"):
            words += [word[:-1], ";"]
        else:
            words.append(word)
    segment: list[str] = []
    cut = False  # after a redirection: its target, not the command's
    for word in [*words, ";"]:
        if word in SEPARATORS:
            command = _program(_unbracket(segment))
            if command:
                found.append(command)
            segment, cut = [], False
        elif REDIRECT.match(word) and not PLACEHOLDER.match(word):
            cut = True
        elif not cut:
            segment.append(word)
    return found


def _fenced(text: str) -> tuple[list[tuple[int, str, str]], list[str]]:
    """(line number, info string, line) of every line inside a fenced block; and the text's lines with those
    lines (and the fences) blanked, for the inline spans."""
    code, prose, fence, info = [], [], None, ""
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        opening = FENCE.match(stripped)
        if fence is None and opening:
            fence, info = opening.group(1), (opening.group(2).split() or [""])[0].lower()
            prose.append("")
        elif fence is not None and stripped.startswith(fence) and not stripped.strip(fence[0]):
            fence = None
            prose.append("")
        elif fence is not None:
            code.append((number, info, line))
            prose.append("")
        else:
            prose.append(line)
    return code, prose


def _block_lines(code: list[tuple[int, str, str]]) -> list[tuple[int, str]]:
    """The command lines of the shell blocks: continuations joined, a console block's output left out."""
    lines: list[tuple[int, str]] = []
    joining = False
    for number, info, line in code:
        if info not in SHELL_BLOCKS:
            joining = False
            continue
        if joining:
            lines[-1] = (lines[-1][0], lines[-1][1] + " " + line.strip().removesuffix("\\"))
        elif info != "console" or line.lstrip().startswith("$ "):
            lines.append((number, line.strip().removesuffix("\\")))
        else:
            continue
        joining = line.rstrip().endswith("\\")
    return lines


def _spans(prose: list[str]) -> list[tuple[int, str, str]]:
    """Each inline code span of the prose: (line number, its text, its paragraph); a span ends in its paragraph."""
    spans: list[tuple[int, str, str]] = []
    paragraph: list[tuple[int, str]] = []
    for number, line in [*enumerate(prose, 1), (len(prose) + 1, "")]:
        if line.strip():
            paragraph.append((number, line))
            continue
        if paragraph:
            text = "\n".join(line for _, line in paragraph)
            runs = list(re.finditer(r"`+", text))
            i = 0
            while i < len(runs):
                closer = next((j for j in range(i + 1, len(runs)) if runs[j].group() == runs[i].group()), None)
                if closer is None:
                    i += 1
                    continue
                body = text[runs[i].end() : runs[closer].start()]
                start = paragraph[0][0] + text.count("\n", 0, runs[i].start())
                spans.append((start, " ".join(body.replace("\\|", "|").split()), " ".join(text.split())))
                i = closer + 1
        paragraph = []
    return spans


def commands_in(text: str, doc: str) -> list[Command]:
    """Every command `text` (Markdown) shows, in order of its lines. A line that starts with a command but cannot be
    split as shell (a quote left open) is one with argv ("?",), which `check` reports."""
    code, prose = _fenced(text)
    lines = text.splitlines()
    headings = [0, *(n for n, line in enumerate(prose, 1) if re.match(r"^#{1,6}\s", line)), len(lines) + 1]
    found = []
    blocks = [(False, number, line, "") for number, line in _block_lines(code)]
    for inline, number, line, paragraph in [*blocks, *((True, *span) for span in _spans(prose))]:
        heading = max(h for h in headings if h <= number)
        section = " ".join(lines[max(heading, 1) - 1 : min(h for h in headings if h > number) - 1]) if inline else ""
        shell = _as_command(line) if inline else line
        if inline and not _starts_a_command(shell):
            continue
        try:
            commands = shell_commands(shell)
        except ValueError as exc:
            commands = [("?", str(exc))] if _starts_a_command(shell) else []
        # `ernie-deploy` alone in a span names the program
        found += [
            Command(doc, number, line, argv, inline, paragraph, section)
            for argv in commands
            if not inline or len(argv) > 1
        ]
    return sorted(found, key=lambda c: c.line)


def doc_commands(root: Path = ROOT) -> list[Command]:
    return [c for doc in DOCS for c in commands_in((root / doc).read_text(encoding="utf-8"), doc)]


# --------------------------------------------------------------------------------------------------
# Placeholders: the values the parser takes


def _is_placeholder(word: str, action: argparse.Action | None) -> bool:
    if action is not None and action.choices and word.lower() in {str(c).lower() for c in action.choices}:
        return False  # a choice, or one in the wrong case (`--device GPU`), which argparse refuses
    return bool(PLACEHOLDER.match(word)) or MORE in word or word.startswith("/path/to/")


def _value(action: argparse.Action | None, word: str) -> str:
    """A value `action` takes in place of the placeholder `word`."""
    if action is None:
        return word
    if action.choices:
        return str(next(iter(action.choices)))
    if callable(action.type) and action.type is not str:
        for candidate in ("1", "0.5"):
            try:
                action.type(candidate)
                return candidate
            except (TypeError, ValueError, argparse.ArgumentTypeError):
                continue
    return word


def _arity(action: argparse.Action) -> tuple[int, float]:
    """How many words an option takes: (at least, at most)."""
    nargs = action.nargs
    if nargs is None:
        return 1, 1
    if nargs == "?":
        return 0, 1
    if nargs == "*":
        return 0, float("inf")
    if nargs == "+":
        return 1, float("inf")
    if isinstance(nargs, int):
        return nargs, nargs
    return 0, float("inf")  # REMAINDER, PARSER


def _looks_like_option(word: str) -> bool:
    return word.startswith("-") and len(word) > 1 and not re.match(r"^-\d", word)


def fill(parser: argparse.ArgumentParser | None, words: list[str], inline: bool = False) -> list[str]:
    """`words` with each placeholder replaced by a value its argument takes (parser: a subcommand's, found by name,
    also counts; None: no parser, words kept as written)."""
    if parser is None:
        return list(words)
    options = parser._option_string_actions
    positionals = [a for a in parser._actions if not a.option_strings]
    out: list[str] = []
    i, next_positional = 0, 0
    while i < len(words):
        word = words[i]
        i += 1
        if word == "--":
            out += words[i - 1 :]
            break
        if _looks_like_option(word):
            flag, equals, value = word.partition("=")
            action = options.get(flag)  # written whole: no parser here takes an abbreviation
            if equals:
                out.append(f"{flag}={_value(action, value) if _is_placeholder(value, action) else value}")
                continue
            out.append(word)
            if action is None:
                continue
            least, most = _arity(action)
            taken = 0
            while taken < most and i < len(words) and not _looks_like_option(words[i]):
                value = words[i]
                i += 1
                if value == MORE and taken >= least:
                    continue  # more of the same
                out.append(_value(action, value) if _is_placeholder(value, action) else value)
                taken += 1
            if taken < least and inline and i == len(words):
                out += [_value(action, "VALUE")] * (least - taken)  # the prose gives the value
            continue
        if word == MORE:
            continue  # more arguments
        action = positionals[next_positional] if next_positional < len(positionals) else None
        if isinstance(action, argparse._SubParsersAction):
            out.append(word)
            return out + fill(action.choices.get(word), words[i:], inline)
        if action is not None and action.nargs not in ("*", "+", argparse.REMAINDER):
            next_positional += 1
        out.append(_value(action, word) if _is_placeholder(word, action) else word)
    return out


class _Options:
    """A stand-in parser for fill(): the options `ernie-deploy`'s commands take, the first command's where several
    share one (the flags convert.sh and quickstart.sh pass on to them)."""

    def __init__(self) -> None:
        self._option_string_actions: dict[str, argparse.Action] = {}
        self._actions: list[argparse.Action] = []
        for command in _subcommands(build_parser()).values():
            for flag, action in command._option_string_actions.items():
                self._option_string_actions.setdefault(flag, action)


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def fill_script(name: str, words: list[str], inline: bool = False) -> list[str]:
    """A script's arguments with its placeholders given values: bench.sh's by `python -m benchmarks`'s parser,
    serve.sh's flags by `ernie-deploy serve`'s, convert.sh's and quickstart.sh's by ernie-deploy's options of the
    same name; the others' kept as written."""
    if name == "bench":
        from benchmarks.cli import MODES
        from benchmarks.cli import build_parser as benchmarks_parser

        modes = _subcommands(benchmarks_parser())
        if words[:1] and words[0] in MODES:
            return [words[0], *fill(modes[words[0]], words[1:], inline)]
        return fill(modes["run"], words, inline)
    if name == "serve":
        repository = words[:1] if words[:1] and not words[0].startswith("-") else []
        rest = words[len(repository) :]
        return repository + fill(_subcommands(build_parser())["serve"], rest, inline)
    if name in ("convert", "quickstart"):
        return fill(_Options(), words, inline)
    return list(words)


# --------------------------------------------------------------------------------------------------
# Checking one command


def _nothing_required(parser: argparse.ArgumentParser) -> None:
    """Every argument of `parser` and its subcommands optional (an inline span's prose gives the rest)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _nothing_required(sub)
        else:
            action.required = False
    for group in parser._mutually_exclusive_groups:  # "one of the arguments ... is required"
        group.required = False


def _parse(parser: argparse.ArgumentParser, words: list[str]) -> tuple[str | None, str, argparse.Namespace | None]:
    """(argparse's error or None, what the parse wrote on stderr, the options: None after --help)."""
    err, out = io.StringIO(), io.StringIO()
    with redirect_stderr(err), redirect_stdout(out):
        try:
            args = parser.parse_args(words)
            return None, err.getvalue(), args
        except SystemExit as exc:
            if exc.code in (0, None):
                return None, err.getvalue(), None
    message = [line for line in err.getvalue().splitlines() if ": error: " in line]
    return (message[-1] if message else err.getvalue().strip() or "argparse exited 2"), err.getvalue(), None


def _deprecated(stderr: str) -> str | None:
    lines = [line for line in stderr.splitlines() if "deprecated:" in line]
    return f"{OLD_SPELLING}{lines[0]}" if lines else None


def _moved(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str | None:
    """The message of a command that parses but has moved (it only says where to)."""
    from ernie_deploy.cli.bench import moved_command, moved_flags

    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    help_of = {choice.dest: choice.help or "" for choice in sub._choices_actions}
    if help_of.get(args.command, "").startswith("moved"):
        return f"`ernie-deploy {args.command}` has {help_of[args.command]}"
    if args.command == "bench" and moved_command(args):
        return f"{' '.join(moved_flags(args))} moved: run `bash scripts/bench.sh {moved_command(args)}`"
    return None


def _check_ernie_deploy(command: Command) -> str | None:
    parser = build_parser()
    if command.inline:
        _nothing_required(parser)
    error, stderr, args = _parse(parser, fill(parser, list(command.argv[1:]), command.inline))
    return error or _deprecated(stderr) or (args is not None and _moved(parser, args)) or None


@cache
def _client_task(path: Path):
    """The task a client script serves and its docstring: the one TaskSpec it imports, and its __doc__."""
    from ernie_deploy.core.tasks import TaskSpec

    module = runpy.run_path(str(path), run_name="client_under_test")  # its main() runs only as __main__
    tasks = [value for value in module.values() if isinstance(value, TaskSpec)]
    assert len(tasks) == 1, f"{path}: expected one task, found {tasks}"
    return tasks[0], module.get("__doc__")


def _check_client(command: Command, root: Path) -> str | None:
    from ernie_deploy.evaluate.served import client_parser

    path = root / command.argv[0]
    if not path.is_file():
        return f"no such client: {command.argv[0]}"
    task, doc = _client_task(path)
    parser = client_parser(task, doc)
    parser.prog = path.name
    if command.inline:
        _nothing_required(parser)
    error, stderr, _ = _parse(parser, fill(parser, list(command.argv[1:]), command.inline))
    return error or _deprecated(stderr)


_script_runs: dict[tuple[str, tuple[str, ...]], tuple[int | None, str]] = {}
_script_lock = threading.Lock()


def run_parse_only(path: Path, words: tuple[str, ...]) -> tuple[int | None, str]:
    """(exit status, stderr) of `bash path words...` with ERNIE_DEPLOY_PARSE_ONLY=1, from its checkout's root
    (status None: it ran past the timeout). Each distinct run happens once."""
    key = (str(path), words)
    with _script_lock:
        if key in _script_runs:
            return _script_runs[key]
    try:
        proc = subprocess.run(
            ["bash", str(path), *words],
            cwd=path.parent.parent,
            env={**os.environ, PARSE_ONLY: "1"},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=SCRIPT_TIMEOUT_S,
        )
        result = (proc.returncode, proc.stderr)
    except subprocess.TimeoutExpired as exc:
        result = (None, exc.stderr.decode() if isinstance(exc.stderr, bytes) else exc.stderr or "")
    with _script_lock:
        _script_runs[key] = result
    return result


def _script_run(command: Command, root: Path) -> tuple[Path, tuple[str, ...]] | str:
    """The script and arguments a parse-only run takes, or why it cannot run."""
    path = root / command.argv[0]
    if not path.is_file():
        return f"no such script: {command.argv[0]}"
    if PARSE_ONLY not in path.read_text(encoding="utf-8"):
        return (
            f"{command.argv[0]} has no parse-only mode ({PARSE_ONLY}=1: parse the arguments, exit 0 or 2 before "
            "doing anything), so it is not run"
        )
    name = SCRIPT.match(command.argv[0]).group(1)
    return path, tuple(fill_script(name, list(command.argv[1:]), command.inline))


def _check_script(command: Command, root: Path) -> str | None:
    run = _script_run(command, root)
    if isinstance(run, str):
        return run
    status, stderr = run_parse_only(*run)
    shown = " ".join(shlex.quote(w) for w in run[1])
    if status is None:
        return f"`{command.argv[0]} {shown}` with {PARSE_ONLY}=1 ran past {SCRIPT_TIMEOUT_S} s"
    if status != 0:
        said = [line for line in stderr.splitlines() if line.strip()]
        return f"`{command.argv[0]} {shown}` with {PARSE_ONLY}=1 exited {status}: {said[-1] if said else '(silent)'}"
    return _deprecated(stderr)


def _check_benchmarks(command: Command) -> str | None:
    """`python -m benchmarks [MODE] ...`, what bench.sh runs (no mode: `run`)."""
    from benchmarks.cli import MODES
    from benchmarks.cli import build_parser as benchmarks_parser

    words = list(command.argv[1:])
    if not words[:1] or words[0] not in (*MODES, "-h", "--help"):
        words = ["run", *words]
    parser = benchmarks_parser()
    if command.inline:
        _nothing_required(parser)
    error, stderr, _ = _parse(parser, fill_script("bench", words, command.inline))
    return error or _deprecated(stderr)


class _Parsing(BaseException):
    """Raised in place of parsing, with the parser: how _module_parser stops a main() before it does anything."""


def _module_parser(module: str) -> argparse.ArgumentParser | str:
    """The parser `python -m module` reads its arguments with, or why there is none: a new one each call, caught
    when the module's main() starts to parse (it has not done anything yet) and stopped there."""
    try:
        imported = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module:
            raise
        return f"no such module: {module}"
    main = getattr(imported, "main", None)
    if main is None or "ArgumentParser(" not in Path(imported.__file__).read_text(encoding="utf-8"):
        return f"{module} has no main() that parses its arguments"

    def stop(parser, *args, **kwargs):
        raise _Parsing(parser)

    with mock.patch.object(argparse.ArgumentParser, "parse_known_args", stop):
        try:
            main([])
        except _Parsing as parsing:
            return parsing.args[0]
    return f"{module}.main([]) parsed nothing"


def _check_module(command: Command) -> str | None:
    module = command.argv[0].removeprefix(MODULE)
    if module == "benchmarks":
        return _check_benchmarks(command)
    parser = _module_parser(module)
    if isinstance(parser, str):
        return parser
    if command.inline:
        _nothing_required(parser)
    error, stderr, _ = _parse(parser, fill(parser, list(command.argv[1:]), command.inline))
    return error or _deprecated(stderr)


def _check_tritonserver(command: Command) -> str | None:
    """Triton's options by name, each with a value where it takes one, as the environment's tritonserver reads them
    (server/launcher.py); a line of a block whole, as that tritonserver takes it (a --model-repository, nothing it
    refuses)."""
    from ernie_deploy.core.errors import BadOptionsError
    from ernie_deploy.server.launcher import TRITON_OPTIONS, _split, parse_triton_args

    words = list(command.argv[1:])
    try:
        if not command.inline:
            parse_triton_args(words)
            return None
        if words and TRITON_OPTIONS.get(words[-1].removeprefix("--")):
            words.append("VALUE")  # a flag that ends a span takes its value from the prose
        _split(words)
    except BadOptionsError as exc:
        return f"tritonserver: {exc}"
    return None


@cache
def _owners(root: Path) -> dict[str, list[tuple[str, ...]]]:
    """flag -> the commands of ernie-deploy, the clients and the measurements of `python -m benchmarks` that take it,
    each as the words that start it."""
    from benchmarks.cli import build_parser as benchmarks_parser
    from ernie_deploy.evaluate.served import client_parser

    parsers = [(("ernie-deploy", name), parser) for name, parser in _subcommands(build_parser()).items()]
    parsers += [((f"clients/{p.name}",), client_parser(*_client_task(p))) for p in sorted(root.glob("clients/*.py"))]
    parsers += [((BENCHMARKS, mode), parser) for mode, parser in _subcommands(benchmarks_parser()).items()]
    owners: dict[str, list[tuple[str, ...]]] = {}
    for program, parser in parsers:
        for flag in parser._option_string_actions:
            owners.setdefault(flag, []).append(program)
    return owners


@cache
def _module_flags(module: str) -> frozenset[str]:
    parser = _module_parser(module) if _project_module(module) else None
    return frozenset(parser._option_string_actions if isinstance(parser, argparse.ArgumentParser) else ())


def _takers(flag: str, root: Path, section: str):
    """The commands that take `flag`, each as the words that start it: ernie-deploy's commands, the clients,
    `python -m benchmarks`'s measurements, tritonserver, the modules of this project the span's section names
    (`python -m benchmarks.uie`), then the scripts whose text holds the flag (each one a parse-only run)."""
    from ernie_deploy.server.launcher import TRITON_OPTIONS

    yield from _owners(root).get(flag, [])
    if flag.startswith("--") and flag[2:] in TRITON_OPTIONS:
        yield (TRITONSERVER,)
    for module in sorted(set(re.findall(r"python3? -m ([\w.]+)", section)) - {"benchmarks"}):
        if flag in _module_flags(module):
            yield (MODULE + module,)
    for path in sorted((root / "scripts").glob("[!_]*.sh")):
        text = path.read_text(encoding="utf-8")
        if PARSE_ONLY in text and re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text):
            yield (f"scripts/{path.name}",)


def _foreign(flag: str, known: tuple[str, ...]) -> bool:
    return flag in known or (flag.endswith("*") and any(k.startswith(flag[:-1]) for k in known))


def check_flags(command: Command, root: Path = ROOT) -> str | None:
    """Why a span of flags alone (`--fused`, `--layout ensemble`) is no command line's, or None where one takes it:
    a command that has its first flag takes them all as written (their values checked as that command checks them),
    or its section names a program of another project that takes them (FOREIGN_FLAGS). Which of these commands the
    prose means is not read (only which modules and other programs its section names): that some command takes the
    span fails a misspelt flag and one that no command has now."""
    words = command.argv[1:]
    flag = words[0].partition("=")[0]
    reasons = []
    for program in _takers(flag, root, command.section):
        reason = check(replace(command, argv=(*program, *words)), root)
        if reason is None:
            return None
        reasons.append(f"as `{' '.join(program)}`'s: {reason}")
    flags = [word.partition("=")[0] for word in words if _looks_like_option(word)]
    for program, known in FOREIGN_FLAGS.items():
        if program in command.section.lower() and all(_foreign(f, known) for f in flags):
            return None
    return reasons[0] if reasons else f"no command takes {flag} (nor a program its section names)"


def _check(command: Command, root: Path) -> str | None:
    program = command.argv[0]
    if program == "?":
        return f"the shell cannot split it: {command.argv[1]}"
    if program == "ernie-deploy":
        return _check_ernie_deploy(command)
    if program == TRITONSERVER:
        return _check_tritonserver(command)
    if program.startswith(MODULE):
        return _check_module(command)
    if program == FLAGS:
        return check_flags(command, root)
    if CLIENT.match(program):
        return _check_client(command, root)
    return _check_script(command, root)


def check(command: Command, root: Path = ROOT) -> str | None:
    """Why `command` does not run as written with the current command lines, or None when it parses."""
    if command.inline:
        for i, word in enumerate(command.argv):
            if ALTERNATIVES.match(word):  # `off|run|always`: each one
                each = [
                    replace(command, argv=(*command.argv[:i], one, *command.argv[i + 1 :])) for one in word.split("|")
                ]
                return next(filter(None, (check(one, root) for one in each)), None)
    reason = _check(command, root)
    if reason and reason.startswith(OLD_SPELLING) and command.inline and "deprecated" in command.paragraph.lower():
        return None  # an old spelling, in a paragraph that says it is one
    return reason


# --------------------------------------------------------------------------------------------------
# The docs


COMMANDS = doc_commands()


@pytest.fixture(scope="module")
def scripts_run():
    """Every docs command of a script run once in parse-only mode, a few at a time (each starts a shell, some a
    Python), before the tests read the results."""
    runs = set()
    for command in COMMANDS:
        run = _script_run(command, ROOT) if SCRIPT.match(command.argv[0]) else "not a script"
        if not isinstance(run, str):
            runs.add(run)
    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(lambda run: run_parse_only(*run), runs))


@pytest.mark.parametrize("command", COMMANDS, ids=[c.id for c in COMMANDS])
def test_every_command_the_docs_show_parses(command, scripts_run):
    reason = check(command)
    assert reason is None, f"{command.id}: `{command.text}`: {reason}"


def test_the_docs_show_commands_of_every_kind():
    """The reader finds what the docs hold: ernie-deploy commands in blocks and in spans (with the program's name and
    without), flags alone, tritonserver, scripts and clients."""
    assert any(c.argv[0] == "ernie-deploy" and not c.inline for c in COMMANDS)
    assert any(c.argv[0] == "ernie-deploy" and c.inline and c.text.startswith("ernie-deploy ") for c in COMMANDS)
    assert any(c.argv[0] == "ernie-deploy" and c.inline and c.text.startswith("build ") for c in COMMANDS)
    assert any(c.argv[0] == FLAGS for c in COMMANDS)
    assert any(c.argv[0] == TRITONSERVER and not c.inline for c in COMMANDS)
    assert any(SCRIPT.match(c.argv[0]) for c in COMMANDS)
    assert any(CLIENT.match(c.argv[0]) for c in COMMANDS)
    assert {c.doc for c in COMMANDS} >= {"README.md", "docs/SERVING.md", "docs/CLIENTS.md"}


# --------------------------------------------------------------------------------------------------
# The reader and the checker on Markdown written here

SAMPLE = """\
# Sample

Build with `ernie-deploy build`; `ernie-deploy` alone is no command, nor is `tritonserver`.
Then `ernie-deploy rollout --model news` puts it live (the prose names --to).
A printed line: `ernie-deploy check: deprecated: the repository as a positional argument`.

```bash
ernie-deploy build --no-fused                        # a flag no command has
ernie-deploy build --runtime tensorrt                # not a choice
ernie-deploy rollout ernie_seqcls --to 2             # the model as a positional argument: an old spelling
FOO=1 ernie-deploy rollout --model NAME --to N | tee out.txt   # placeholders, an assignment, a pipe
ernie-deploy serve --repository models \\
  --http-port 8000 > server.log 2>&1 &
ernie-deploy export --task T [--max-seq-len N] && ernie-deploy eval --task T
# ernie-deploy build --commented-out
...
ernie-deploy rollout --model news
ernie-deploy long-texts
python clients/seq_cls_grpc_client.py --text "a" --text-pair "b"
python clients/pair_cls_grpc_client.py --text "a" --text-pair "b" --batch-size N
```

```console
$ python clients/seq_cls_grpc_client.py --text "a"
ernie-deploy build --output-is-not-a-command
```

```yaml
ernie-deploy build --yaml-is-not-shell
```
"""


def _sample() -> dict[int, Command]:
    return {c.line: c for c in commands_in(SAMPLE, "SAMPLE.md")}


def test_the_reader_finds_commands_in_blocks_and_spans_and_drops_the_shell_around_them():
    commands = commands_in(SAMPLE, "SAMPLE.md")
    assert [(c.line, c.inline) for c in commands] == [
        (3, True),
        (4, True),
        (8, False),
        (9, False),
        (10, False),
        (11, False),
        (12, False),
        (14, False),
        (14, False),
        (17, False),
        (18, False),
        (19, False),
        (20, False),
        (24, False),
    ]
    by_line = _sample()
    assert by_line[3].argv == ("ernie-deploy", "build")
    assert by_line[11].argv == ("ernie-deploy", "rollout", "--model", "NAME", "--to", "N")
    assert by_line[12].argv == ("ernie-deploy", "serve", "--repository", "models", "--http-port", "8000")
    assert [c.argv for c in commands if c.line == 14] == [
        ("ernie-deploy", "export", "--task", "T", "--max-seq-len", "N"),
        ("ernie-deploy", "eval", "--task", "T"),
    ]
    assert by_line[24].argv == ("clients/seq_cls_grpc_client.py", "--text", "a")
    assert shell_commands('PATH="$(bash scripts/install_prometheus.sh | tail -1):$PATH"') == [
        ("scripts/install_prometheus.sh",)
    ]
    assert shell_commands("bash scripts/_env.sh; python clients/x.txt; sh scripts/serve.sh DIR") == [
        ("scripts/serve.sh", "DIR")
    ]


def test_the_checker_fails_a_bad_flag_a_bad_choice_an_old_spelling_and_a_moved_command():
    by_line = _sample()
    assert "unrecognized arguments: --no-fused" in check(by_line[8])
    assert "invalid choice: 'tensorrt'" in check(by_line[9])
    assert "deprecated:" in check(by_line[10]) and "--model ernie_seqcls" in check(by_line[10])
    assert "moved" in check(by_line[18])
    assert "unrecognized arguments: --text-pair" in check(by_line[19])
    assert "required: --to" in check(by_line[17])  # in a block a command is whole
    for line in (3, 4, 11, 12, 20, 24):
        assert check(by_line[line]) is None, (line, check(by_line[line]))
    assert [check(c) for c in commands_in(SAMPLE, "SAMPLE.md") if c.line == 14] == [None, None]
    # the same line in a doc: named by file and line
    doc = SAMPLE + "\nThen `ernie-deploy build --no-fused`.\n"
    last = commands_in(doc, "docs/X.md")[-1]
    assert last.id == f"docs/X.md:{doc.count(chr(10))}" and "--no-fused" in check(last)


SPANS = """\
Spans without the program: `build --layout ensemble`, `serve --gateway`.

Flags alone: `--fused`, `--layout ensemble`, `-r DIR`, `--layout` (its value in the prose), `--text-pair` (a client's).

Each of a few: `--ort-spinning off|run|always`, `build --ner-decoding argmax|constrained`.

Misspelt: `--fsued`. Gone: `build --no-such-flag`. A bad value: `--layout nowhere`, `--ort-spinning off|sometimes`.

Abbreviated: `build --lay ensemble`, `--ta seq_cls`, `tritonserver --model-repo=models`.

Triton's: `tritonserver --model-repository=models`, `--grpc-restricted-protocol`, `--cache-config=local,size=N`.

Old spellings, deprecated: `manifests --name`, `--name`.

An old spelling, not said to be one: `manifests --name`.

```bash
tritonserver --model-repository=models --http-port 8000
tritonserver --http-port 8000
tritonserver --model-repo=models
python -m benchmarks.gateway_profile --requests 10 --route hf
python -m benchmarks.gateway_profile --route nowhere
python -m benchmarks.NAME --whatever
python3 -m venv .venv
```

## Docker

`docker run` takes `--shm-size=1g`.

## Profiling

`python -m benchmarks.gateway_profile` times it: `--cprofile FILE` profiles it, `--route hf` the other route.

## Elsewhere

Named by no program here: `--shm-size=1g`, `--cprofile FILE`. No module: `python -m benchmarks.no_such_module --x`.
"""


def test_spans_without_the_program_and_flags_alone_are_read_and_held_to_what_some_command_takes():
    commands = commands_in(SPANS, "SPANS.md")
    reasons = {(c.line, c.text): check(c) for c in commands}
    ok = [
        (1, "build --layout ensemble"),
        (1, "serve --gateway"),
        (3, "--fused"),
        (3, "--layout ensemble"),
        (3, "-r DIR"),
        (3, "--layout"),
        (3, "--text-pair"),
        (5, "--ort-spinning off|run|always"),
        (5, "build --ner-decoding argmax|constrained"),
        (11, "tritonserver --model-repository=models"),
        (11, "--grpc-restricted-protocol"),
        (11, "--cache-config=local,size=N"),
        (13, "manifests --name"),
        (13, "--name"),
        (18, "tritonserver --model-repository=models --http-port 8000"),
        (21, "python -m benchmarks.gateway_profile --requests 10 --route hf"),
        (29, "--shm-size=1g"),  # its section names docker
        (33, "--cprofile FILE"),  # its section names the module
        (33, "--route hf"),
    ]
    bad = {
        (7, "--fsued"): "no command takes --fsued",
        (7, "build --no-such-flag"): "unrecognized arguments: --no-such-flag",
        (7, "--layout nowhere"): "invalid choice: 'nowhere'",
        (7, "--ort-spinning off|sometimes"): "invalid choice: 'sometimes'",
        (9, "build --lay ensemble"): "unrecognized arguments: --lay",
        (9, "--ta seq_cls"): "no command takes --ta",
        (9, "tritonserver --model-repo=models"): "tritonserver has no option --model-repo",
        (15, "manifests --name"): "deprecated: --name",
        (19, "tritonserver --http-port 8000"): "no --model-repository given",  # a block's line is whole
        (20, "tritonserver --model-repo=models"): "tritonserver has no option --model-repo",
        (22, "python -m benchmarks.gateway_profile --route nowhere"): "invalid choice: 'nowhere'",
        (37, "--shm-size=1g"): "no command takes --shm-size",
        (37, "--cprofile FILE"): "no command takes --cprofile",
        (37, "python -m benchmarks.no_such_module --x"): "no such module: benchmarks.no_such_module",
    }
    # not read: `docker run` (none of this project's), a program's name alone, a placeholder module, python's venv
    assert sorted(reasons) == sorted([*ok, *bad])
    assert [key for key in ok if reasons[key] is not None] == []
    for key, reason in bad.items():
        assert reason in (reasons[key] or ""), (key, reasons[key])
    by_text = {c.text: c for c in commands}
    assert by_text["build --layout ensemble"].argv == ("ernie-deploy", "build", "--layout", "ensemble")
    assert by_text["-r DIR"].argv == (FLAGS, "-r", "DIR")
    assert (
        by_text["python -m benchmarks.gateway_profile --route nowhere"].argv[0] == MODULE + "benchmarks.gateway_profile"
    )


def test_a_bad_command_put_back_into_a_real_doc_is_named_by_file_and_line():
    """README.md as it is, with a block of commands the current command lines refuse appended: each one fails,
    named by its line."""
    text = (ROOT / "README.md").read_text(encoding="utf-8").rstrip("\n")
    start = len(text.splitlines()) + 3  # after a blank line and the opening fence
    bad = [
        "ernie-deploy build --no-fused",
        "ernie-deploy build --device GPU",
        "ernie-deploy rollout ernie_seqcls --to 2",
        "ernie-deploy check models",
        "python clients/seq_cls_grpc_client.py --batch-size many",
    ]
    doc = text + "\n\n```bash\n" + "\n".join(bad) + "\n```\n"
    added = [c for c in commands_in(doc, "README.md") if c.line >= start]
    assert [(c.id, c.text) for c in added] == [(f"README.md:{start + i}", line) for i, line in enumerate(bad)]
    reasons = [check(c) for c in added]
    assert "unrecognized arguments: --no-fused" in reasons[0]
    assert "invalid choice: 'GPU'" in reasons[1]
    assert "deprecated:" in reasons[2] and "deprecated:" in reasons[3]
    assert "invalid int value: 'many'" in reasons[4]


def test_placeholders_take_values_their_arguments_accept():
    parser = build_parser()
    assert fill(parser, ["rollout", "--model", "NAME", "--to", "N"]) == ["rollout", "--model", "NAME", "--to", "1"]
    assert fill(parser, ["build", "--task", "T", "--runtime=<runtime>"]) == [
        "build",
        "--task",
        "embed",
        "--runtime=auto",
    ]
    assert fill(parser, ["build", "--task", "seq_cls", "..."]) == ["build", "--task", "seq_cls"]
    assert fill(parser, ["build", "--layout"], inline=True) == ["build", "--layout", "auto"]
    assert fill_script("bench", ["levers", "--task", "T", "--duration", "N"]) == [
        "levers",
        "--task",
        "embed",
        "--duration",
        "1",
    ]
    assert fill_script("serve", ["DIR", "--http-port", "PORT"]) == ["DIR", "--http-port", "1"]


def test_a_script_without_a_parse_only_mode_is_not_run(tmp_path):
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "make.sh").write_text("#!/usr/bin/env bash\ntouch made\n")
    command = commands_in("```bash\nbash scripts/make.sh\nscripts/gone.sh\n```\n", "X.md")
    assert "has no parse-only mode" in check(command[0], tmp_path)
    assert "no such script" in check(command[1], tmp_path)
    assert not (tmp_path / "made").exists()


SCRIPTS = sorted(p.name for p in (ROOT / "scripts").glob("[!_]*.sh") if PARSE_ONLY in p.read_text())
TAKES_ANYTHING = {"test.sh"}  # its arguments go to pytest, which checks them


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_script_in_parse_only_mode_refuses_a_bad_argument_and_makes_nothing(name, tmp_path):
    """Parse-only in the checkout: no arguments are fine, an unknown flag is refused with exit status 2. In a copy
    of the scripts with no .venv: nothing is made (no .venv, nothing in the cache), whatever the exit status."""
    path = ROOT / "scripts" / name
    assert run_parse_only(path, ())[0] == 0
    status, stderr = run_parse_only(path, ("--no-such-flag",))
    if name in TAKES_ANYTHING:
        assert status == 0, stderr
    else:
        assert status == 2 and stderr.strip(), (status, stderr)
    copy = tmp_path / "checkout"
    (copy / "scripts").mkdir(parents=True)
    for script in (ROOT / "scripts").glob("*.sh"):
        (copy / "scripts" / script.name).write_text(script.read_text())
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    subprocess.run(
        ["bash", str(copy / "scripts" / name)],
        cwd=copy,
        env={**os.environ, PARSE_ONLY: "1", "ERNIE_DEPLOY_CACHE": str(cache_dir), "XDG_CACHE_HOME": str(cache_dir)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=SCRIPT_TIMEOUT_S,
    )
    assert sorted(p.name for p in copy.iterdir()) == ["scripts"], sorted(copy.iterdir())
    assert not list(cache_dir.iterdir())
