"""Every error the project makes is typed and carries its fix (core/errors.py's rule), checked on the source.

An AST scan of all the project's Python (the package ernie_deploy/, the benchmarks, the client scripts, the generated
models, and the Python the shell scripts run: a `python - <<'TAG'` here-document or a `python -c '...'`) finds each
construction of an error of the hierarchy: the classes of core/errors.py and every class of the project that
subclasses one of them. The base ErnieDeployError is never made itself (a caller catches failures by their
subclass), and each error is given a fix: the `fix` argument its constructor (or the classmethod called) takes, by
position or by keyword. A construction counts wherever it is, not only after `raise`: an error built, returned and
raised elsewhere (a refusal, a per-request error) reaches the user just the same. Re-raising an error that exists
(`raise`, `raise exc`) makes none and is not checked."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "ernie_deploy"
ERRORS = PACKAGE / "core" / "errors.py"
BASE = "ErnieDeployError"
# The Python outside the package, by folder and pattern: none of it is exempt, since its errors reach users (a
# benchmark's refusal, a client script's message) as the package's do.
OUTSIDE = {"benchmarks": "**/*.py", "clients": "*.py", "models": "*/1/model.py"}
SCRIPTS = {"scripts": "*.sh", "docker": "*.sh"}
# A shell line that runs python on a here-document (`python - args <<'PY'`, `"$PYTHON_BIN" - <<'EOF'`), and a
# `python -c '...'`: the Python those carry is the scripts' own. `<<<` (a here-string) feeds no program text.
_HEREDOC = re.compile(r"python[\w.]*\"?\s.*?<<(?!<)-?\s*(['\"]?)([A-Za-z_]\w*)\1", re.IGNORECASE)
_DASH_C = re.compile(r"python[\w.]*\"?\s+-c\s+'([^']*)'", re.IGNORECASE)


@dataclass(frozen=True)
class Takes:
    """Where a callable takes its fix: its position among the arguments a call passes, or keyword only (None)."""

    position: int | None


def _fix_parameter(function: ast.FunctionDef, implicit: int) -> Takes | None:
    """Where `function` takes `fix`, `implicit` leading parameters (self, cls) not passed by the call; None when it
    takes no fix (the class builds its own)."""
    positional = [a.arg for a in function.args.posonlyargs + function.args.args][implicit:]
    if "fix" in positional:
        return Takes(positional.index("fix"))
    if "fix" in [a.arg for a in function.args.kwonlyargs]:
        return Takes(None)
    return None


def _base_names(node: ast.ClassDef) -> list[str]:
    return [b.id if isinstance(b, ast.Name) else b.attr for b in node.bases if isinstance(b, ast.Name | ast.Attribute)]


def hierarchy(trees: dict[Path, ast.Module]) -> dict[str, ast.ClassDef]:
    """Each error class of the hierarchy by name: core/errors.py's, then every class of the package whose base is one
    of them, to any depth."""
    classes = {n.name: n for n in trees[ERRORS].body if isinstance(n, ast.ClassDef)}
    others = [n for tree in trees.values() for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    grown = True
    while grown:
        grown = False
        for node in others:
            if node.name not in classes and any(b in classes for b in _base_names(node)):
                classes[node.name] = node
                grown = True
    return classes


def _method(classes: dict[str, ast.ClassDef], name: str, method: str) -> ast.FunctionDef | None:
    """`method` as class `name` has it, its own or inherited within the hierarchy."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        current = todo.pop(0)
        if current in seen or current not in classes:
            continue
        seen.add(current)
        for node in classes[current].body:
            if isinstance(node, ast.FunctionDef) and node.name == method:
                return node
        todo.extend(_base_names(classes[current]))
    return None


def _passes(call: ast.Call, takes: Takes) -> bool:
    """Whether `call` passes a fix where `takes` says, and not a bare None or empty text."""

    def real(value: ast.expr) -> bool:
        return not (isinstance(value, ast.Constant) and value.value in (None, ""))

    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return True  # *args or **kwargs: what they hold is not in the source
    if takes.position is not None and len(call.args) > takes.position:
        return real(call.args[takes.position])
    return any(k.arg == "fix" and real(k.value) for k in call.keywords)


def _called(call: ast.Call, classes: dict[str, ast.ClassDef]) -> tuple[str, str, bool] | None:
    """(class, method, whether the call constructs) of a call of the hierarchy: `Cls(...)` or `module.Cls(...)` ->
    (Cls, __init__, True), `Cls.make(...)` -> (Cls, make, False), `Cls.__init__(self, ...)` -> (Cls, __init__, False);
    None for any other call."""
    func = call.func
    if isinstance(func, ast.Name) and func.id in classes:
        return func.id, "__init__", True
    if isinstance(func, ast.Attribute):
        if func.attr in classes:
            return func.attr, "__init__", True
        owner = func.value
        name = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else None
        if name in classes:
            return name, func.attr, False
    return None


def violations(trees: dict[Path, ast.Module]) -> list[str]:
    """`file:line: what` for every error of the hierarchy made as the base class or without a fix."""
    classes = hierarchy(trees)
    found = []
    for path, tree in sorted(trees.items()):
        where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        calls = sorted((n for n in ast.walk(tree) if isinstance(n, ast.Call)), key=lambda n: (n.lineno, n.col_offset))
        for call in calls:
            called = _called(call, classes)
            if called is None:
                continue
            name, method, constructs = called
            text = ast.unparse(call).split("\n")[0][:100]
            if name == BASE and constructs:
                found.append(f"{where}:{call.lineno}: the base class, not a subclass: {text}")
                continue
            function = _method(classes, name, method)
            if function is None:
                continue  # not a method of the hierarchy (an attribute read off an instance's class, say)
            decorators = {d.id for d in function.decorator_list if isinstance(d, ast.Name)}
            # Cls(...) and Cls.make(...) of a classmethod do not pass the first parameter; Cls.__init__(self, ...), a
            # staticmethod's or a plain method's called on the class do
            takes = _fix_parameter(function, int(constructs or "classmethod" in decorators))
            if takes is not None and not _passes(call, takes):
                found.append(f"{where}:{call.lineno}: no fix: {text}")
        for line in _base_as_value(tree):
            found.append(f"{where}:{line}: the base class chosen as the error to make (`failure = A if x else {BASE}`)")
    return found


def _base_as_value(tree: ast.Module) -> list[int]:
    """Lines where the base class is picked as a value (assigned, returned, one side of a conditional): an error
    made through a name the scan of calls cannot follow."""

    def base(node: ast.expr | None) -> bool:
        return isinstance(node, ast.Name) and node.id == BASE

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.IfExp) and (base(node.body) or base(node.orelse)):
            lines.append(node.lineno)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.Return) and base(node.value):
            lines.append(node.lineno)
    return sorted(lines)


def parse(paths) -> dict[Path, ast.Module]:
    return {path: ast.parse(path.read_text(encoding="utf-8"), str(path)) for path in paths}


def package_trees() -> dict[Path, ast.Module]:
    return parse(sorted(PACKAGE.rglob("*.py")))


def embedded_python(script: str) -> list[tuple[int, str]]:
    """(line of its first line, source) of each piece of Python a shell script runs: here-documents fed to python
    and `python -c '...'` strings."""
    lines = script.split("\n")
    found = []
    for number, line in enumerate(lines, start=1):
        found += [(number, match.group(1)) for match in _DASH_C.finditer(line)]
        heredoc = _HEREDOC.search(line)
        if heredoc:
            dashed = "<<-" in line[: heredoc.end()]
            tag, body, start = heredoc.group(2), [], number
            while lines[start - 1].endswith("\\") and start < len(lines):
                start += 1  # the command goes on past a backslash; the document begins after its last line
            for text in lines[start:]:
                if (text.lstrip("\t") if dashed else text) == tag:
                    break
                body.append(text)
            found.append((start + 1, "\n".join(body)))
    return found


def script_trees(paths) -> dict[Path, ast.Module]:
    """Each shell script that runs Python, as one module of all the Python it runs, at the script's own lines."""
    trees = {}
    for path in paths:
        pieces = []
        for first, source in embedded_python(path.read_text(encoding="utf-8")):
            tree = ast.parse(source, f"{path}:{first}")
            ast.increment_lineno(tree, first - 1)
            pieces += tree.body
        if pieces:
            trees[path] = ast.Module(body=pieces, type_ignores=[])
    return trees


def project_trees() -> dict[Path, ast.Module]:
    """All the project's Python but its tests: the package, the Python files outside it, the scripts' Python."""
    outside = sorted(p for folder, pattern in OUTSIDE.items() for p in (ROOT / folder).glob(pattern))
    scripts = sorted(p for folder, pattern in SCRIPTS.items() for p in (ROOT / folder).glob(pattern))
    return {**package_trees(), **parse(outside), **script_trees(scripts)}


def test_every_error_is_a_subclass_with_its_fix():
    found = violations(project_trees())
    assert not found, f"{len(found)} errors made as the base class or without a fix:\n" + "\n".join(found)


def test_the_scan_reads_all_the_project_python():
    """The scan reaches each place Python lives, so that a module outside the package is never left unread."""
    read = {path.relative_to(ROOT).parts[0] for path in project_trees()}
    assert {"ernie_deploy", "benchmarks", "clients", "scripts"} <= read
    assert ROOT / "benchmarks" / "peer" / "server.py" in project_trees()  # a subpackage of the benchmarks too


def test_the_scan_finds_base_errors_in_scripts_and_benchmarks(tmp_path):
    """A base-class error in a shell script's Python or in a benchmark is found at the line it is on."""
    script = tmp_path / "run.sh"
    script.write_text(
        "#!/bin/bash\n"
        "python -c 'from ernie_deploy.core.errors import ErnieDeployError as E'\n"
        '"$PYTHON_BIN" - "$1" <<\'PY\' || fail "it failed" \\\n'  # 3: the command goes on to line 4
        '  "read the message above"\n'
        "from ernie_deploy.core.errors import ErnieDeployError\n"
        "raise ErnieDeployError('base', 'a fix')\n"  # 6
        "PY\n"
        "read -r -a names <<< \"$(python -c 'print(1)')\"\n"
        "out=$(python - <<PY\n"
        "from ernie_deploy.core import errors\n"
        "raise errors.ErnieDeployError('base again', 'a fix')\n"  # 11
        "PY\n"
        ")\n"
        "cat <<'EOF'\n"
        "raise ErnieDeployError('not python: cat reads it', 'a fix')\n"
        "EOF\n",
        encoding="utf-8",
    )
    bench = tmp_path / "bench.py"
    bench.write_text(
        "from ernie_deploy.core.errors import BadOptionsError, ErnieDeployError\n"
        "def f():\n"
        "    raise BadOptionsError('problem', 'the fix')\n"
        "    raise ErnieDeployError('base', 'a fix')\n",  # 4
        encoding="utf-8",
    )
    trees = {**parse([ERRORS]), **script_trees([script]), **parse([bench])}
    found = [":".join(v.split(":")[:2]) for v in violations(trees)]
    assert found == [f"{bench}:4", f"{script}:6", f"{script}:11"]


def test_the_scan_finds_what_it_is_for(tmp_path):
    """Planted faults are found, each at its line; re-raises and errors given their fix are not."""
    planted = tmp_path / "planted.py"
    planted.write_text(
        "from ernie_deploy.core import errors\n"
        "from ernie_deploy.core.errors import BadRequest, ErnieDeployError\n"
        "class Refused(BadRequest):\n"
        "    @classmethod\n"
        "    def of(cls, problem, fix, where): ...\n"
        "class Keyed(ErnieDeployError):\n"
        "    def __init__(self, status, problem, *, fix=None): ErnieDeployError.__init__(self, problem, fix)\n"
        "def f(exc):\n"
        "    raise ErnieDeployError('base', 'a fix')\n"  # 9
        "    raise BadRequest('no fix')\n"  # 10
        "    raise Refused('no fix either', fix=None)\n"  # 11
        "    raise errors.BadDataError('by module, no fix')\n"  # 12
        "    raise Keyed(400, 'by position only', 'not the fix')\n"  # 13
        "    raise Refused.of('problem', '', ['body'])\n"  # 14
        "    refusal = BadRequest('built, raised later')\n"  # 15
        "    raise refusal\n"
        "    raise exc from None\n"
        "    raise\n"
        "    raise BadRequest('problem', 'the fix')\n"
        "    raise Refused('problem', fix='the fix')\n"
        "    raise Keyed(400, 'problem', fix='the fix')\n"
        "    raise Refused.of('problem', 'the fix', ['body'])\n"
        "    raise errors.BadDataError('problem', exc.fix)\n"
        "    failure = BadRequest if exc else ErnieDeployError\n"  # 24
        "    raise failure('problem', 'the fix')\n",
        encoding="utf-8",
    )
    trees = {**parse([ERRORS]), **parse([planted])}
    lines = [int(v.split(":")[1]) for v in violations(trees)]
    assert lines == [9, 10, 11, 12, 13, 14, 15, 24]


def test_probe_and_gateway_errors_are_of_the_hierarchy():
    from ernie_deploy.core.errors import ErnieDeployError, ServerNotReadyError
    from ernie_deploy.gateway.errors import GatewayError
    from ernie_deploy.server.probe import ProbeFailed

    assert issubclass(ProbeFailed, ServerNotReadyError) and issubclass(GatewayError, ErnieDeployError)
    probe = ProbeFailed("no answer from http://localhost:8000", "start the server")
    assert (probe.problem, probe.fix) == ("no answer from http://localhost:8000", "start the server")
    refused = GatewayError(422, "validation", "inputs is int", fix="send a text or a list of texts", loc=["body"])
    assert (refused.status, refused.error_type, refused.loc) == (422, "validation", ["body"])
    assert refused.message == "inputs is int; fix: send a text or a list of texts"
    assert (refused.problem, refused.fix) == ("inputs is int", "send a text or a list of texts")
    # The one-line message, as callers of the gateway have written it, reads the same and splits into its parts.
    joined = GatewayError(503, "overloaded", "the gateway is busy; fix: retry", headers={"Retry-After": "1"})
    assert (joined.message, joined.problem, joined.fix, joined.headers) == (
        "the gateway is busy; fix: retry",
        "the gateway is busy",
        "retry",
        {"Retry-After": "1"},
    )
    assert GatewayError(500, "backend", "no fix given").message == "no fix given"
    assert ProbeFailed("a problem alone").problem == "a problem alone"
