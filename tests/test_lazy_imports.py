"""Imports sit at the top of their module, where a reader and the import graph see them. An import of ours inside a
function is one that must wait: the module it names loads a heavy third-party package (paddle, paddlenlp, paddle2onnx,
onnxruntime, onnx, tritonclient, grpc, the gateway's web stack) that the importing module does not load already, so
that a command which never needs it does not pay for it; or it sits in a `try` that handles its absence."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OURS = ("ernie_deploy", "benchmarks")
HEAVY = frozenset(
    {"paddle", "paddlenlp", "paddle2onnx", "onnxruntime", "onnx", "tritonclient", "grpc", "uvicorn", "starlette"}
)
# The most first-party imports inside functions the package and benchmarks/ may hold, each one waiting for a heavy
# package as above.
BUDGET = 60


def _name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules(root: Path) -> dict[str, ast.Module]:
    return {
        _name(root, path): ast.parse(path.read_text(encoding="utf-8"), str(path))
        for base in OURS
        if (root / base).is_dir()
        for path in sorted((root / base).rglob("*.py"))
    }


def _imports_in(tree: ast.Module, holds) -> set[int]:
    """The ids of the import statements inside the blocks `holds` picks."""
    return {
        id(node)
        for block in ast.walk(tree)
        if holds(block)
        for node in ast.walk(block)
        if isinstance(node, (ast.Import, ast.ImportFrom))
    }


def _inner(tree: ast.Module) -> set[int]:
    """The imports inside a function."""
    return _imports_in(tree, lambda block: isinstance(block, (ast.FunctionDef, ast.AsyncFunctionDef)))


def _type_checking(tree: ast.Module) -> set[int]:
    """The imports under `if TYPE_CHECKING:`, which never run."""
    return _imports_in(tree, lambda block: isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test))


def _in_try(tree: ast.Module) -> set[int]:
    """The imports in a `try`, which handles their absence."""
    return _imports_in(tree, lambda block: isinstance(block, ast.Try))


def _targets(node: ast.AST, modules: dict[str, ast.Module]) -> tuple[set[str], set[str]]:
    """(our modules, third-party top-level packages) that an import statement loads."""
    ours, third = set(), set()
    if isinstance(node, ast.Import):
        for alias in node.names:
            (ours if alias.name in modules else third).add(alias.name if alias.name in modules else alias.name)
    elif isinstance(node, ast.ImportFrom) and not node.level:
        module = node.module or ""
        if module.split(".")[0] in OURS:
            for alias in node.names:
                ours.add(f"{module}.{alias.name}" if f"{module}.{alias.name}" in modules else module)
        else:
            third.add(module)
    return {m for m in ours if m in modules}, {t.split(".")[0] for t in third}


def _heavy(modules: dict[str, ast.Module]) -> dict[str, set[str]]:
    """Per module, the heavy packages that importing it loads, through its module-level imports."""
    edges, own = {}, {}
    for name, tree in modules.items():
        inner = _inner(tree) | _type_checking(tree)
        edges[name], own[name] = set(), set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in inner:
                ours, third = _targets(node, modules)
                edges[name] |= ours | {p for m in ours for p in _parents(m) if p in modules}
                own[name] |= third & HEAVY
    memo: dict[str, set[str]] = {}

    def heavy(name: str, seen: frozenset[str]) -> set[str]:
        if name not in memo:
            found = set(own[name])
            for target in edges[name] - seen:
                found |= heavy(target, seen | {name})
            memo[name] = found
        return memo[name]

    return {name: heavy(name, frozenset()) for name in modules}


def _parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def lazy_imports(root: Path) -> tuple[int, list[str]]:
    """(how many first-party imports sit inside functions, those of them that need not wait)."""
    modules = _modules(root)
    heavy = _heavy(modules)
    count, needless = 0, []
    for name, tree in modules.items():
        inner, tries = _inner(tree), _in_try(tree)
        for node in ast.walk(tree):
            if id(node) not in inner:
                continue
            ours, _ = _targets(node, modules)
            if not ours:
                continue
            count += 1
            waits_for = set().union(*(heavy[m] for m in ours)) - heavy[name]
            if not waits_for and id(node) not in tries:
                needless.append(
                    f"{name.replace('.', '/')}.py:{node.lineno}: {', '.join(sorted(ours))} loads nothing heavy "
                    f"{name} does not load already: import it at the top of the module"
                )
    return count, needless


def test_imports_wait_only_for_heavy_packages():
    count, needless = lazy_imports(ROOT)
    assert not needless, "\n".join(needless)
    assert count <= BUDGET, f"{count} first-party imports inside functions, over the budget of {BUDGET}"


def test_the_check_catches_an_import_that_need_not_wait(tmp_path):
    package = tmp_path / "ernie_deploy"
    (package / "core").mkdir(parents=True)
    for path in (package / "__init__.py", package / "core" / "__init__.py"):
        path.write_text("")
    (package / "core" / "light.py").write_text("X = 1\n")
    (package / "core" / "heavy.py").write_text("import paddle\n")
    (package / "core" / "user.py").write_text(
        "def f():\n    from ernie_deploy.core.light import X\n    return X\n\n\n"
        "def g():\n    from ernie_deploy.core.heavy import paddle\n    return paddle\n"
    )
    count, needless = lazy_imports(tmp_path)
    assert count == 2
    assert needless == [
        "ernie_deploy/core/user.py:2: ernie_deploy.core.light loads nothing heavy ernie_deploy.core.user does not "
        "load already: import it at the top of the module"
    ]


@pytest.mark.parametrize("module", ["ernie_deploy.cli", "ernie_deploy.serving.pipeline"])
def test_commands_and_the_serving_steps_load_no_paddle(module):
    """The heavy packages wait where they should: the command line and what runs inside Triton load no paddle."""
    import subprocess
    import sys

    found = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys, {module}; print(sorted(m for m in ('paddle', 'paddlenlp') if m in sys.modules))",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    ).stdout.strip()
    assert found == "[]"
