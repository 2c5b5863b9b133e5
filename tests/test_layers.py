"""The package tree is the architecture: each package imports only the layers below it (data flows one way:
checkpoint -> static -> ONNX -> repository -> server -> client -> report), and what runs inside Triton imports
only numpy, tokenizers and onnxruntime. Function-level (lazy) imports count too.

ALLOWED says what the code does: every edge it allows is one some module uses, and no module imports another that
imports it back, directly or around a circle."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "ernie_deploy"

# package -> the ernie_deploy packages it may import (itself always allowed)
ALLOWED = {
    "core": set(),
    "serving": {"core"},
    "fetch": {"core"},
    "train": {"core", "serving", "fetch"},
    "export": {"core", "serving", "fetch"},
    # fetch: the reference profile `build` records is counted on the model's dev split or a split file it names
    "repository": {"core", "serving", "fetch"},
    "server": {"core"},
    "deployfiles": {"core", "server"},
    "client": {"core", "serving"},
    "evaluate": {"core", "serving", "fetch", "export", "client"},
    "operate": {"core", "repository", "client"},
    # serving: a request past a model's limits is refused by the gateway as its tokenizer would (serving.limits)
    "gateway": {"core", "serving", "repository", "server", "client"},
    "bench": {"core", "serving", "repository", "server", "client", "evaluate"},
    "reliability": {"core", "serving", "repository", "server", "client", "evaluate", "operate"},
    "pipeline": {"core", "serving", "fetch", "train", "export", "repository", "server"},
    "cli": {
        "core",
        "serving",
        "fetch",
        "repository",
        "server",
        "deployfiles",
        "client",
        "evaluate",
        "operate",
        "bench",
        "reliability",
        "pipeline",
        "gateway",
    },
}
# Code outside the package, by the files it is (relative to the repository root) -> the packages it may import: the
# command-line clients (the served accuracy report of ernie_deploy.evaluate, a task from core), and the Python models
# `ernie-deploy build` generates, which Triton runs and which hand everything to ernie_deploy.serving.
OUTSIDE = {
    "clients/*.py": {"core", "evaluate"},
    "models/*/1/model.py": {"serving"},
}
# This repository's own benchmarks (benchmarks/, `bash scripts/bench.sh`) sit outside the package and its layers: they
# may import any package of ours, and nothing that ships (the package, the clients, the generated models) imports
# them, since they are not installed with it.
RESEARCH = "benchmarks"
# The task kinds (ernie_deploy/kinds) are split by layer rather than being one: the registry and each kind's facts
# record (kinds/__init__.py, kinds/base.py, kinds/<kind>/__init__.py) count as core, and kinds/<kind>/<layer>.py as
# <layer>, held to that layer's rules (third-party limits included) and importable wherever that layer is.
SPLIT = "kinds"
# What may be imported from outside the project, where that is restricted.
INSIDE_TRITON = {"numpy", "tokenizers", "onnxruntime", "triton_python_backend_utils"}
THIRD_PARTY = {
    "core": set(),
    "serving": INSIDE_TRITON,
    "clients/*.py": set(),
    "models/*/1/model.py": INSIDE_TRITON,
}


def _import_nodes(path: Path) -> Iterator[tuple[int, str, list[str]]]:
    """(line, module, names imported from it) of every import in the file, module level or not."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                pytest.fail(f"{path}:{node.lineno}: relative import; write ernie_deploy.<package>.<module>")
            yield node.lineno, node.module or "", [alias.name for alias in node.names]


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import, a module of the kinds named where `from` takes it from its kind package."""
    found = []
    for line, module, names in _import_nodes(path):
        split = module.startswith(f"ernie_deploy.{SPLIT}.")
        named = [f"{module}.{n}" for n in names if split and _layer(f"{module}.{n}") != _layer(module)]
        found += [(line, target) for target in named or [module]]
    return found


def _packages() -> list[Path]:
    return sorted(p for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists() and p.name != SPLIT)


def _split_layer(path: Path) -> str:
    """The layer a module under kinds/ counts as (see SPLIT)."""
    parts = path.relative_to(PACKAGE / SPLIT).parts
    return Path(parts[1]).stem if len(parts) == 2 and parts[1] != "__init__.py" else "core"


def _files(room: str) -> list[Path]:
    """The files of a package (every module in it, and the modules under kinds/ that count as it) or of a rule in
    OUTSIDE."""
    if room in OUTSIDE:
        return sorted(PACKAGE.parent.glob(room))
    split = [p for p in (PACKAGE / SPLIT).rglob("*.py") if _split_layer(p) == room]
    return sorted((PACKAGE / room).rglob("*.py")) + sorted(split)


def _rules() -> dict[str, set[str]]:
    return {**ALLOWED, **OUTSIDE}


def _layer(module: str) -> str | None:
    """The ernie_deploy package an import names (`ernie_deploy.fetch.data` -> fetch), or None outside the project or
    for the top-level package itself; under kinds/, the layer its module counts as (`ernie_deploy.kinds.token.serving`
    -> serving, `ernie_deploy.kinds.token` -> core)."""
    top, _, rest = module.partition(".")
    if top != "ernie_deploy":
        return None
    parts = rest.split(".")
    if parts[0] == SPLIT:
        return parts[2] if len(parts) > 2 and parts[2] in ALLOWED else "core"
    return parts[0] or None


def _problems(room: str) -> list[str]:
    allowed = _rules()[room]
    problems = []
    for path in _files(room):
        for line, module in _imports(path):
            top = module.partition(".")[0]
            where = f"{path.relative_to(PACKAGE.parent)}:{line}: {module}"
            layer = _layer(module)
            if top == "ernie_deploy":
                if layer and layer != room and layer not in allowed:
                    problems.append(f"{where} (may import: {', '.join(sorted(allowed)) or 'nothing'})")
            elif room in THIRD_PARTY and top not in sys.stdlib_module_names and top != "__future__":
                if top not in THIRD_PARTY[room]:
                    problems.append(
                        f"{where} (outside the project, may import: "
                        f"{', '.join(sorted(THIRD_PARTY[room])) or 'the standard library only'})"
                    )
    return problems


def test_every_package_has_a_rule():
    assert {p.name for p in _packages()} == set(ALLOWED)
    assert not [p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py"], "modules belong in a package"
    strays = [str(p.relative_to(PACKAGE)) for p in (PACKAGE / SPLIT).rglob("*.py") if _split_layer(p) not in ALLOWED]
    assert not strays, (
        f"modules under {SPLIT}/ are named after the layer they belong to ({', '.join(ALLOWED)}): {strays}"
    )


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_the_layers_below_it(package):
    problems = _problems(package)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("files", sorted(OUTSIDE))
def test_clients_and_generated_models_import_only_their_layers(files):
    problems = _problems(files)
    assert not problems, "\n".join(problems)


def test_nothing_that_ships_imports_the_benchmarks():
    shipped = sorted(PACKAGE.rglob("*.py")) + [path for room in OUTSIDE for path in _files(room)]
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {module}"
        for path in shipped
        for line, module, _ in _import_nodes(path)
        if module.partition(".")[0] == RESEARCH
    ]
    assert not found, (
        f"{RESEARCH}/ is not installed with the package, so nothing that ships may import it:\n"
        + "\n".join(found)
        + f"\nmove what both need into ernie_deploy, and let {RESEARCH}/ import it from there"
    )


def test_the_rule_catches_an_import_of_the_benchmarks(tmp_path, monkeypatch):
    bad = tmp_path / "ernie_deploy" / "bench"
    bad.mkdir(parents=True)
    (bad / "x.py").write_text("def f():\n    from benchmarks.targets import TARGETS\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "ernie_deploy")
    with pytest.raises(AssertionError, match=r"ernie_deploy/bench/x.py:2: benchmarks.targets"):
        test_nothing_that_ships_imports_the_benchmarks()


def test_every_allowed_edge_is_used():
    """An edge no module uses is a rule that says more than the code does: it would let the next import cross a
    layer without anyone deciding it should."""
    unused = []
    for room, allowed in _rules().items():
        files = _files(room)
        if not files:
            unused.append(f"{room}: no file matches; remove its rule")
            continue
        used = {_layer(module) for path in files for _, module in _imports(path)}
        unused += [f"{room} -> {layer}: no module imports it" for layer in sorted(allowed - used)]
    assert not unused, "\n".join(unused) + "\nremove these edges from ALLOWED / OUTSIDE in tests/test_layers.py"


def test_the_rule_catches_a_wrong_import(tmp_path, monkeypatch):
    bad = tmp_path / "ernie_deploy" / "serving"
    bad.mkdir(parents=True)
    (bad / "__init__.py").write_text("")
    (bad / "x.py").write_text("import paddle\nfrom ernie_deploy.server import serve\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "ernie_deploy")
    with pytest.raises(AssertionError) as failure:
        test_package_imports_only_the_layers_below_it("serving")
    assert "import paddle" not in str(failure.value)  # reported by module name, with its line
    assert "x.py:1: paddle" in str(failure.value) and "x.py:2: ernie_deploy.server" in str(failure.value)


def test_a_kind_module_obeys_the_rules_of_its_layer(tmp_path, monkeypatch):
    kind = tmp_path / "ernie_deploy" / SPLIT / "fake"
    kind.mkdir(parents=True)
    (kind / "__init__.py").write_text("from ernie_deploy.evaluate import metrics\n")
    (kind / "serving.py").write_text("import paddle\nfrom ernie_deploy.kinds.fake import evaluate\n")
    (kind / "evaluate.py").write_text("from ernie_deploy.client import grpc_client\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "ernie_deploy")
    with pytest.raises(AssertionError) as failure:
        test_package_imports_only_the_layers_below_it("serving")
    assert "serving.py:1: paddle (outside the project" in str(failure.value)
    assert "serving.py:2: ernie_deploy.kinds.fake.evaluate (may import: core)" in str(failure.value)
    with pytest.raises(AssertionError, match=r"fake/__init__.py:1: ernie_deploy.evaluate \(may import: nothing"):
        test_package_imports_only_the_layers_below_it("core")
    test_package_imports_only_the_layers_below_it("evaluate")  # evaluate may import client


def test_the_rule_covers_clients_and_generated_models(tmp_path, monkeypatch):
    (tmp_path / "clients").mkdir()
    (tmp_path / "clients" / "c.py").write_text("from ernie_deploy.server.process import TritonServer\n")
    (tmp_path / "models" / "m" / "1").mkdir(parents=True)
    (tmp_path / "models" / "m" / "1" / "model.py").write_text("import paddle\nfrom ernie_deploy.core import tasks\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "ernie_deploy")
    with pytest.raises(AssertionError, match=r"clients/c.py:1: ernie_deploy.server.process \(may import: core"):
        test_clients_and_generated_models_import_only_their_layers("clients/*.py")
    with pytest.raises(AssertionError) as failure:
        test_clients_and_generated_models_import_only_their_layers("models/*/1/model.py")
    assert "model.py:1: paddle (outside the project" in str(failure.value)
    assert "model.py:2: ernie_deploy.core (may import: serving)" in str(failure.value)


def test_an_unused_edge_is_caught(monkeypatch):
    monkeypatch.setitem(ALLOWED, "serving", {"core", "fetch"})
    with pytest.raises(AssertionError, match="serving -> fetch: no module imports it"):
        test_every_allowed_edge_is_used()


# --------------------------------------------------------------------------------------------------
# Import cycles between modules


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _module_graph() -> dict[str, dict[str, int]]:
    """module -> {module it imports: the line}, over every module of the package, lazy imports included. An import
    points at the module it names (`from ernie_deploy.fetch import data` at ernie_deploy.fetch.data, `from
    ernie_deploy.cli import main` at ernie_deploy.cli), not at the packages above it."""
    modules = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, dict[str, int]] = {name: {} for name in modules}
    for name, path in modules.items():
        for line, module, names in _import_nodes(path):
            targets = [f"{module}.{n}" for n in names if f"{module}.{n}" in modules]
            if len(targets) < len(names) or not names:
                # `import a.b.c`, or names defined in the module: the longest prefix that is a module
                while module and module not in modules:
                    module = module.rpartition(".")[0]
                targets.append(module)
            for target in targets:
                if target and target != name:
                    graph[name].setdefault(target, line)
    return graph


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One circle [a, b, ..., a] for each group of modules that reach each other (Tarjan's strongly connected
    components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in graph.get(module, {}):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = []
            while not group or group[-1] != module:
                group.append(stack.pop())
            if len(group) > 1:
                groups.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return [_circle(graph, group) for group in groups]


def _circle(graph: dict[str, dict[str, int]], group: list[str]) -> list[str]:
    """The shortest circle from the group's first module back to it, breadth first inside the group."""
    start, members = group[0], set(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        step = []
        for module in frontier:
            for target in sorted(graph[module]):
                if target == start:
                    return [*paths[module], start]
                if target in members and target not in paths:
                    paths[target] = [*paths[module], target]
                    step.append(target)
        frontier = step
    raise AssertionError(f"{start} reaches no circle, though its group {group} is strongly connected")


def test_no_import_cycles_inside_the_package():
    graph = _module_graph()
    circles = [
        " -> ".join(f"{a} (line {graph[a][b]})" for a, b in zip(circle, circle[1:])) + f" -> {circle[-1]}"
        for circle in _cycles(graph)
    ]
    assert not circles, (
        "modules that import each other, directly or around a circle (lazy imports count):\n"
        + "\n".join(circles)
        + "\nmove what both need into a module below them, or pass it in as an argument"
    )


def test_the_cycle_check_catches_a_lazy_circle(tmp_path, monkeypatch):
    package = tmp_path / "ernie_deploy" / "bench"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from ernie_deploy.bench.b import g\n")
    (package / "b.py").write_text("def g():\n    from ernie_deploy.bench import c\n")
    (package / "c.py").write_text("import ernie_deploy.bench.a\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "ernie_deploy")
    with pytest.raises(AssertionError) as failure:
        test_no_import_cycles_inside_the_package()
    assert (
        "ernie_deploy.bench.a (line 1) -> ernie_deploy.bench.b (line 2) -> ernie_deploy.bench.c (line 1) -> "
        "ernie_deploy.bench.a" in str(failure.value)
    )


# Ways of finding a module by a name made at run time (importlib's import_module, __import__, pkgutil's walks): an
# import neither a reader nor the module graph above sees, so a circle through it goes uncaught. The package names each
# module it imports (a table of the kinds, of the layouts) in an import statement.
DYNAMIC_IMPORTS = {"import_module", "__import__", "pkgutil", "iter_modules", "walk_packages"}


def _dynamic_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, ast.Import):
            names = [alias.name.partition(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [(node.module or "").partition(".")[0], *(alias.name for alias in node.names)]
        else:
            continue
        found += [
            f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {name}" for name in names if name in DYNAMIC_IMPORTS
        ]
    return found


def test_no_module_is_found_by_a_name_made_at_run_time():
    found = [line for path in sorted(PACKAGE.rglob("*.py")) for line in _dynamic_imports(path)]
    assert not found, (
        "modules found by a name made at run time:\n"
        + "\n".join(found)
        + "\nimport each by name where it is needed (a table that lists them imports each one)"
    )


def test_the_dynamic_import_check_catches_each_way(tmp_path, monkeypatch):
    package = tmp_path / "ernie_deploy" / "bench"
    package.mkdir(parents=True)
    (package / "a.py").write_text(
        "import importlib\nimport pkgutil\n\n\ndef f(name):\n"
        "    from importlib import import_module\n\n    importlib.import_module(name)\n    return __import__(name)\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "ernie_deploy")
    with pytest.raises(AssertionError) as failure:
        test_no_module_is_found_by_a_name_made_at_run_time()
    for line in ("a.py:2: pkgutil", "a.py:6: import_module", "a.py:8: import_module", "a.py:9: __import__"):
        assert f"ernie_deploy/bench/{line}" in str(failure.value)


def test_the_architecture_guide_shows_the_rule_as_it_is():
    """docs/ARCHITECTURE.md's import table is ALLOWED (and OUTSIDE), so the guide a newcomer reads cannot drift."""
    import re

    rows = re.findall(r"^\| ([\w/*.]+) \| ([^|]+) \|$", (ROOT / "docs" / "ARCHITECTURE.md").read_text(), re.M)
    shown = {name: set() if "nothing" in deps else {d.strip() for d in deps.split(",")} for name, deps in rows}
    shown.pop("package", None)  # the header row
    assert shown == {**ALLOWED, **OUTSIDE}
