"""Artifacts are written whole or not at all, and nothing the server sends back is ever evaluated."""

from __future__ import annotations

import ast
import hashlib
import json
from pathlib import Path

import pytest

from ernie_deploy.repository.build import ModelArtifacts, build
from ernie_deploy.repository.options import BuildOptions

from .conftest import artifacts, convert_argv

ROOT = Path(__file__).resolve().parents[1]


def _snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _entry(pipeline) -> ModelArtifacts:
    return artifacts(pipeline)


@pytest.mark.parametrize("where", ["write_json", "copyfile"])
def test_interrupted_build_leaves_the_previous_repository_intact(tiny_pipeline, tmp_path, monkeypatch, where):
    import ernie_deploy.repository.build as repository

    repo = tmp_path / "models"
    build(_entry(tiny_pipeline), repo, BuildOptions(runtime="python", layout="ensemble"))
    (repo / "someone_elses_model").mkdir()
    before = _snapshot(repo)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt  # as Ctrl-C halfway through writing the new models

    if where == "write_json":  # labels.json, after the tokenizer and the model were written
        monkeypatch.setattr(repository, "write_json", interrupted)
    else:
        from ernie_deploy.repository.layouts import base

        monkeypatch.setattr(base.shutil, "copyfile", interrupted)
    with pytest.raises(KeyboardInterrupt):
        build(_entry(tiny_pipeline), repo, BuildOptions(runtime="onnxruntime", layout="ensemble", max_batch_size=8))
    assert _snapshot(repo) == before
    assert (repo / "someone_elses_model").is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["models"]  # no staging folder left behind


def test_rebuild_replaces_whole_model_folders(tiny_pipeline, tmp_path):
    """A model folder never mixes two builds: switching the model step to the ORT backend drops the python
    step's model.py instead of leaving it beside the new config."""
    repo = tmp_path / "models"
    build(_entry(tiny_pipeline), repo, BuildOptions(runtime="python", layout="ensemble"))
    (repo / "ernie_seqcls_model" / "1" / "stale.txt").write_text("from an older build")
    build(_entry(tiny_pipeline), repo, BuildOptions(runtime="onnxruntime", layout="ensemble"))
    files = sorted(p.name for p in (repo / "ernie_seqcls_model" / "1").iterdir())
    assert files == ["model.onnx"]
    assert 'platform: "onnxruntime_onnx"' in (repo / "ernie_seqcls_model" / "config.pbtxt").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["models"]


TEXTS = ["新华社北京电国足公布世预赛名单", "股市大涨", "北京欢迎你"]


@pytest.fixture
def converted(tiny_pipeline, tmp_path):
    """A passing FP32 conversion in onnx/, and the CLI arguments that made it."""
    from ernie_deploy.cli import main

    out, args = convert_argv(tiny_pipeline.static.root, tmp_path, TEXTS)
    assert main(args) == 0
    return out, args


@pytest.mark.parametrize("where", ["paddle2onnx", "parity"])
def test_interrupted_convert_leaves_the_previous_model_intact(converted, monkeypatch, where):
    import ernie_deploy.export.onnx as convert
    from ernie_deploy.cli import main

    out, args = converted
    before = _snapshot(out.parent)

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(convert, "convert" if where == "paddle2onnx" else "check_parity", interrupted)
    calibration = ["--calibration-data", args[-1]]  # static INT8's texts: the parity file, not the data splits
    assert main([*args, "--quantize", "int8", *calibration]) == 130  # the CLI's exit status for Ctrl-C
    assert _snapshot(out.parent) == before  # no staging folder left either


def test_convert_failing_parity_keeps_the_previous_model_and_the_rejected_report(converted, capsys):
    from ernie_deploy.cli import main

    out, args = converted
    before = _snapshot(out.parent)
    assert main([*args, "--tolerance", "-1"]) == 2  # no model can pass: the gate refuses
    captured = capsys.readouterr()
    assert "Paddle and ONNX disagree" in captured.err and "kept the previous model" in captured.out
    rejected = out.parent / "parity.rejected.json"
    assert json.loads(rejected.read_text())["ok"] is False
    assert {k: v for k, v in _snapshot(out.parent).items() if k != rejected.name} == before
    assert main(args) == 0  # the next good run clears the rejected report
    assert not rejected.exists()


def test_convert_refuses_a_parity_check_without_texts(converted, capsys):
    from ernie_deploy.cli import main

    out, args = converted
    before = _snapshot(out.parent)
    assert main([*args, "--parity-n", "0"]) == 2
    assert "the parity check has no texts to run" in capsys.readouterr().err
    assert _snapshot(out.parent) == before


# Calls that would run or unpickle what a server or a file sends: none of them anywhere in the package,
# the clients or the generated model.py files.
FORBIDDEN = {"eval", "exec", "literal_eval"}
FORBIDDEN_MODULES = {"pickle", "cPickle", "dill", "marshal", "shelve", "joblib"}


def _python_files():
    yield from (ROOT / "ernie_deploy").rglob("*.py")
    yield from (ROOT / "clients").glob("*.py")


@pytest.mark.parametrize("path", sorted(_python_files()), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_eval_or_pickle_of_anything_received(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom) else [])
            assert not {n.split(".")[0] for n in names if n} & FORBIDDEN_MODULES, f"{path}:{node.lineno}"
        elif isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name):
                name = node.func.id
            else:  # a method named eval (paddle's model.eval() switches off dropout) is no evaluator
                name = getattr(node.func, "attr", "")
                name = name if name not in ("eval", "exec") else ""
            assert name not in FORBIDDEN, f"{path}:{node.lineno} calls {name}"
            for kw in node.keywords:  # numpy's np.load(..., allow_pickle=True)
                assert not (kw.arg == "allow_pickle" and getattr(kw.value, "value", False)), f"{path}:{node.lineno}"


def test_the_scan_would_catch_an_eval(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import json\nvalue = eval(response.as_numpy('label')[0])\n")
    with pytest.raises(AssertionError, match="calls eval"):
        test_no_eval_or_pickle_of_anything_received(bad)
