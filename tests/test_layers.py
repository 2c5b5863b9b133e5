"""The package tree is the architecture: each package imports only the layers below it (data flows one way:
checkpoint -> static -> ONNX -> repository -> server -> client -> report), and what runs inside Triton imports
only numpy, tokenizers and onnxruntime. Function-level (lazy) imports count too."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "ernie_deploy"

# package -> the ernie_deploy packages it may import (itself always allowed)
ALLOWED = {
    "core": set(),
    "serving": {"core"},
    "fetch": {"core", "serving"},
    "export": {"core", "serving", "fetch"},
    "repository": {"core", "serving", "export"},
    "server": {"core", "repository"},
    "client": {"core", "serving"},
    "evaluate": {"core", "serving", "fetch", "export", "client"},
    "operate": {"core", "serving", "repository", "client"},
    "bench": {"core", "serving", "fetch", "export", "repository", "server", "client", "evaluate", "operate"},
    "cli": {"core", "serving", "fetch", "export", "repository", "server", "client", "evaluate", "operate", "bench"},
}
# What may be imported from outside the project, where that is restricted.
THIRD_PARTY = {
    "core": set(),
    "serving": {"numpy", "tokenizers", "onnxruntime", "triton_python_backend_utils"},
}


def _imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                pytest.fail(f"{path}:{node.lineno}: relative import; write ernie_deploy.<package>.<module>")
            found.append((node.lineno, node.module or ""))
    return found


def _packages() -> list[Path]:
    return sorted(p for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists())


def test_every_package_has_a_rule():
    assert {p.name for p in _packages()} == set(ALLOWED)
    assert not [p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py"], "modules belong in a package"


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_the_layers_below_it(package):
    problems = []
    for path in sorted((PACKAGE / package).rglob("*.py")):
        for line, module in _imports(path):
            top, _, rest = module.partition(".")
            where = f"{path.relative_to(PACKAGE.parent)}:{line}: {module}"
            if top == "ernie_deploy":
                layer = rest.partition(".")[0]
                if layer and layer != package and layer not in ALLOWED[package]:
                    problems.append(f"{where} (may import: {', '.join(sorted(ALLOWED[package])) or 'nothing'})")
            elif package in THIRD_PARTY and top not in sys.stdlib_module_names and top != "__future__":
                if top not in THIRD_PARTY[package]:
                    problems.append(
                        f"{where} (outside the project, may import: "
                        f"{', '.join(sorted(THIRD_PARTY[package])) or 'the standard library only'})"
                    )
    assert not problems, "\n".join(problems)


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
