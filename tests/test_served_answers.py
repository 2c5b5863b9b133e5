"""benchmarks/served_answers.py without a server: which texts each model gets, and what `compare` calls a difference."""

from __future__ import annotations

import base64
import copy
import json

import pytest

from benchmarks import served_answers as sa
from benchmarks import served_answers_build as sab
from benchmarks import served_answers_texts as sat
from ernie_deploy.core.errors import BadRepositoryError


def _tensor(raw: bytes, dtype="FP32", shape=(1, 1)) -> dict:
    return {"dtype": dtype, "shape": list(shape), "bytes": base64.b64encode(raw).decode("ascii")}


def _answers() -> dict:
    return {
        "format": sa.FORMAT,
        "models": {
            "ernie_seqcls": {
                "task": "seq_cls",
                "answers": {
                    "test:0": {
                        "inputs": "aa",
                        "outputs": {
                            "label": _tensor(b"\x07\x00\x00\x00sports", "BYTES"),
                            "confidence": _tensor(b"1234"),
                        },
                    },
                    "edge:empty": {"inputs": "bb", "error": {"status": "StatusCode.INVALID_ARGUMENT", "message": "m"}},
                },
            }
        },
    }


def _write(path, answers):
    path.write_text(json.dumps(answers), encoding="utf-8")
    return str(path)


def test_identical_answers_compare_equal(tmp_path, capsys):
    a, b = _write(tmp_path / "a.json", _answers()), _write(tmp_path / "b.json", _answers())
    assert sa.main(["compare", a, b]) == 0
    assert "1 models, 2 requests, 2 outputs: identical" in capsys.readouterr().out


@pytest.mark.parametrize(
    "change, expected",
    [
        (lambda m: m["answers"]["test:0"]["outputs"]["confidence"].update(bytes="MTIzNQ=="), "test:0 confidence"),
        (lambda m: m["answers"]["test:0"]["outputs"]["confidence"].update(shape=[1]), "test:0 confidence"),
        (lambda m: m["answers"]["test:0"]["outputs"].pop("label"), "test:0 label: BYTES[1, 1]"),
        (lambda m: m["answers"]["edge:empty"]["error"].update(message="other"), "edge:empty: refused"),
        (lambda m: m["answers"]["test:0"].update(inputs="cc"), "test:0: different texts were sent"),
        (lambda m: m["answers"].pop("edge:empty"), "edge:empty: asked only in the first"),
    ],
)
def test_each_difference_is_named_and_fails(tmp_path, capsys, change, expected):
    after = copy.deepcopy(_answers())
    change(after["models"]["ernie_seqcls"])
    a, b = _write(tmp_path / "a.json", _answers()), _write(tmp_path / "b.json", after)
    assert sa.main(["compare", a, b]) == 1
    assert f"ernie_seqcls {expected}" in capsys.readouterr().out


def test_folders_compare_file_by_file(tmp_path, capsys):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    _write(tmp_path / "a" / "default.json", _answers())
    _write(tmp_path / "b" / "default.json", _answers())
    _write(tmp_path / "a" / "graph.json", _answers())
    assert sa.main(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 1
    assert "graph.json: only in" in capsys.readouterr().out


def _inputs(*names, optional=()):
    return [{"name": n, "datatype": "BYTES", "shape": [-1, 1], "optional": n in optional} for n in names]


def test_requests_cover_the_split_edges_pairs_and_schemas(tmp_path):
    (tmp_path / "thucnews_pairs").mkdir()
    rows = "".join(f"same\tt{i}\tp{i}\n" for i in range(300))
    (tmp_path / "thucnews_pairs" / "test.tsv").write_text("label\ttext\ttext_pair\n" + rows, encoding="utf-8")
    requests = dict(sat.requests_for("pair_cls", _inputs("text", "text_pair"), tmp_path))
    assert requests["test:199"] == [{"text": "t199", "text_pair": "p199"}]
    assert "test:200" not in requests
    assert requests["edge:one_char"] == [{"text": "好", "text_pair": "坏"}]
    assert len(requests["batch:0-7"]) == sat.BATCH

    (tmp_path / "msra_ner").mkdir()
    lines = "".join(json.dumps({"text": f"s{i}", "labels": ["O"]}) + "\n" for i in range(5))
    (tmp_path / "msra_ner" / "test.jsonl").write_text(lines, encoding="utf-8")
    requests = dict(sat.requests_for("uie", _inputs("text", "schema", optional=("schema",)), tmp_path))
    assert requests["test:4"] == [{"text": "s4"}]
    assert requests["schema:test:0"] == [{"text": "s0", "schema": sat.SCHEMA}]
    assert len(sat.LONG_TEXT) > 2000


def test_an_input_it_cannot_fill_is_refused(tmp_path):
    with pytest.raises(BadRepositoryError, match="cannot fill"):
        sat.requests_for("seq_cls", _inputs("text", "mystery"), tmp_path)


def test_build_prints_its_commands_and_skips_models_already_converted(tmp_path, capsys):
    inputs = tmp_path / "inputs"
    (inputs / "data").mkdir(parents=True)
    for model in sab.DEMO:
        (inputs / "onnx" / model.name).mkdir(parents=True)
        (inputs / "onnx" / model.name / "model.onnx").write_bytes(b"")
    assert sa.main(["build", "--out", str(tmp_path / "out"), "--inputs", str(inputs), "--print"]) == 0
    script = capsys.readouterr().out
    assert "export --task seq_cls\n" not in script  # converted already: both checkouts serve that file
    assert "make-shape nano seq_cls" in script  # the nano model is not
    for name, _ in sab.REPOSITORIES:
        assert f"build --repository {tmp_path}/out/{name} --runtime python" in script
    assert not (tmp_path / "out").exists()
