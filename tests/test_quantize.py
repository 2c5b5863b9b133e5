"""`convert --quantize int8`: the INT8 model (static scales by default, dynamic with `int8-dynamic`) keeps the
pipeline's signature, runs, stays close to FP32, and is written atomically without leftovers; on the real models it
costs at most one point of accuracy / entity F1. With static scales a text's logits do not depend on the texts it is
batched with; with dynamic ones they do."""

from __future__ import annotations

import json
import tempfile

import numpy as np
import onnx
import pytest

from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.tasks import LOGITS, MODEL_INPUTS
from ernie_deploy.export.drift import check_drift
from ernie_deploy.export.gates import Gates, counted, drop_within
from ernie_deploy.export.optimize import optimize_transformer
from ernie_deploy.export.precision import (
    DEFAULT_QUANT_FORMAT,
    Calibration,
    _require_same_signature,
    quantize_int8,
    quantize_int8_static,
)
from ernie_deploy.serving.runtime import OnnxModel

from .conftest import PARITY_TEXTS, assert_refused_convert_changes_nothing, convert_argv, io_signature

TEXTS = PARITY_TEXTS
# What a static INT8 model's quantized MatMuls are counted as, in the format `convert` writes
STATIC_OP = {"qdq": "MatMul (QDQ)", "qoperator": "QLinearMatMul"}[DEFAULT_QUANT_FORMAT]
# How far a text's logits may move with the texts it is batched with, for FP32 and static INT8: float rounding
FLOAT_NOISE = 1e-5


def _calibration(pipeline, texts=TEXTS) -> Calibration:
    return Calibration(tuple(texts), pipeline.static.vocab_file, 128, source="parity texts")


def _quantize(scales: str, pipeline, out):
    if scales == "static":
        return quantize_int8_static(pipeline.onnx, out, _calibration(pipeline))
    return quantize_int8(pipeline.onnx, out)


@pytest.fixture(
    scope="module",
    params=[(p, s) for p in ("tiny_pipeline", "tiny_token_pipeline") for s in ("dynamic", "static")],
    ids=lambda param: "-".join(param),
)
def quantized(request, tmp_path_factory):
    """(pipeline, INT8 path, the quantizer's summary, scales) for both tiny models, dynamic and static scales."""
    name, scales = request.param
    pipeline = request.getfixturevalue(name)
    out = tmp_path_factory.mktemp("int8") / "model.onnx"
    return pipeline, out, _quantize(scales, pipeline, out), scales


def _encode(pipeline, texts):
    from ernie_deploy.serving.encoding import encode_batch
    from ernie_deploy.serving.tokenizer import build_tokenizer

    return encode_batch(build_tokenizer(pipeline.static.vocab_file), texts, 128)


def test_int8_keeps_names_dtypes_and_dims(quantized):
    pipeline, out, _, _ = quantized
    inputs, outputs = io_signature(out)
    assert (inputs, outputs) == io_signature(pipeline.onnx)
    assert [name for name, _, _ in inputs] == list(MODEL_INPUTS)
    assert all(
        dtype == onnx.TensorProto.INT64 and len(dims) == 2 and all(isinstance(d, str) for d in dims)
        for _, dtype, dims in inputs
    )
    assert [(name, dtype) for name, dtype, _ in outputs] == [(LOGITS, onnx.TensorProto.FLOAT)]


def test_every_matmul_weight_is_int8(quantized):
    pipeline, out, summary, scales = quantized
    fp32, int8 = onnx.load(str(pipeline.onnx)), onnx.load(str(out))
    initializers = {i.name for i in fp32.graph.initializer}
    weights = {n.input[1] for n in fp32.graph.node if n.op_type == "MatMul" and n.input[1] in initializers}
    fp32_weights = sum(int(np.prod(i.dims)) for i in fp32.graph.initializer if i.name in weights)
    ops = [n.op_type for n in int8.graph.node]
    if scales == "dynamic":
        assert summary == {"quantized": {"MatMulInteger": ops.count("MatMulInteger")}}
    else:  # every weight MatMul, as dynamic INT8 quantizes them, with the scales it was calibrated to
        assert summary["quantized"] == {STATIC_OP: len(weights)} and summary["scales"] == "static", summary
        assert summary["calibration"] == {"n": len(TEXTS), "method": "minmax", "source": "parity texts"}
        assert "DynamicQuantizeLinear" not in ops and "MatMulInteger" not in ops
    # Only the attention products (activation x activation) stay FP32 MatMuls.
    initializers = {i.name for i in int8.graph.initializer}
    assert not [n.name for n in int8.graph.node if n.op_type == "MatMul" and n.input[1] in initializers]
    assert sum(summary["quantized"].values()) >= 6, ops  # Q, K, V, attention output, two FFN layers at least
    stored = [i for i in int8.graph.initializer if i.data_type == onnx.TensorProto.INT8 and len(i.dims) == 2]
    assert fp32_weights > 5_000 and sum(int(np.prod(i.dims)) for i in stored) == fp32_weights


def test_int8_runs_and_mostly_agrees_with_fp32(quantized):
    pipeline, out, _, _ = quantized
    enc = _encode(pipeline, TEXTS)
    logits = OnnxModel(out)(enc.input_ids, enc.token_type_ids)
    assert logits.dtype == np.float32 and logits.shape[0] == len(TEXTS) and np.isfinite(logits).all()
    static = pipeline.static
    report = check_drift(
        "int8", static.spec, static.vocab_file, pipeline.onnx, out, TEXTS, gates=Gates(int8_min_agree=0.8)
    )
    assert report.n == len(TEXTS) and report.ok, report
    assert 0 < report.max_abs_diff < 0.5, report  # quantized (not bit-identical), but close
    if report.token_labels_agree is not None:
        assert report.token_labels_agree >= 0.9, report


def test_int8_report_fails_below_the_gate(quantized):
    pipeline, out, _, _ = quantized
    static = pipeline.static
    report = check_drift(
        "int8", static.spec, static.vocab_file, pipeline.onnx, out, TEXTS, gates=Gates(int8_min_agree=1.01)
    )
    assert not report.ok and report.to_dict()["ok"] is False


@pytest.mark.parametrize("scales", ["dynamic", "static"])
def test_no_temporary_files_anywhere(tiny_pipeline, tmp_path, monkeypatch, scales):
    cwd, temp, out_dir = tmp_path / "cwd", tmp_path / "temp", tmp_path / "out"
    for d in (cwd, temp):
        d.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(tempfile, "tempdir", str(temp))  # where every tempfile user (onnxruntime too) writes
    _quantize(scales, tiny_pipeline, out_dir / "model.onnx")
    assert list(cwd.iterdir()) == [] and list(temp.iterdir()) == []
    assert [p.name for p in out_dir.iterdir()] == ["model.onnx"]
    assert sorted(p.name for p in tiny_pipeline.onnx.parent.iterdir()) == ["model.json", "model.onnx"]  # its record


def test_failed_quantization_leaves_no_output(tiny_pipeline, tmp_path, monkeypatch):
    import ernie_deploy.export.precision as convert_module

    def broken(path):
        assert path.exists()  # the file was written, then judged unusable
        raise ErnieDeployError("model does not run")

    out = tmp_path / "out" / "model.onnx"
    with pytest.raises(ErnieDeployError, match="quantized nothing"):
        quantize_int8(tiny_pipeline.onnx, out, op_types=("Conv",))  # the graph has no Conv
    assert not out.exists()
    monkeypatch.setattr(convert_module, "_smoke_run", broken)
    with pytest.raises(ErnieDeployError, match="does not run"):
        quantize_int8(tiny_pipeline.onnx, out)
    assert list(out.parent.iterdir()) == []
    with pytest.raises(ErnieDeployError, match="does not run"):
        quantize_int8_static(tiny_pipeline.onnx, out, _calibration(tiny_pipeline))
    assert list(out.parent.iterdir()) == []
    with pytest.raises(ErnieDeployError, match="needs calibration texts"):
        quantize_int8_static(tiny_pipeline.onnx, out, _calibration(tiny_pipeline, texts=()))
    assert list(out.parent.iterdir()) == []


@pytest.mark.parametrize("name", ["tiny_pipeline", "tiny_token_pipeline"])
def test_static_int8_answers_do_not_depend_on_batch_companions_dynamic_ones_do(name, request, tmp_path):
    """Each text run alone, and in one batch with every other text (padded to the longest, one of 128 tokens): with
    FP32 and static INT8 its logits are the same either way; dynamic INT8 scales a batch by its own range, so its
    logits move with the companions (issue 23: a near tie's label then depends on them)."""
    from ernie_deploy.serving.encoding import encode_batch
    from ernie_deploy.serving.tokenizer import build_tokenizer

    pipeline = request.getfixturevalue(name)
    tokenizer = build_tokenizer(pipeline.static.vocab_file)
    models = {"fp32": pipeline.onnx}
    for scales in ("static", "dynamic"):
        models[scales] = tmp_path / f"{scales}.onnx"
        _quantize(scales, pipeline, models[scales])
    moved = {}
    for kind, path in models.items():
        model = OnnxModel(path)
        together = encode_batch(tokenizer, TEXTS, 128)
        batched = model(together.input_ids, together.token_type_ids)
        worst = 0.0
        for i, text in enumerate(TEXTS):
            alone = encode_batch(tokenizer, [text], 128)
            own = model(alone.input_ids, alone.token_type_ids)[0]
            worst = max(worst, float(np.abs(own - batched[i][: own.shape[0]]).max()))
        moved[kind] = worst
    assert moved["fp32"] <= FLOAT_NOISE and moved["static"] <= FLOAT_NOISE, moved
    assert moved["dynamic"] > 10 * FLOAT_NOISE, moved  # (tiny random models: logits of ~0.1)


def test_a_changed_signature_is_refused(tiny_pipeline):
    reference = onnx.load(str(tiny_pipeline.onnx))
    changed = onnx.load(str(tiny_pipeline.onnx))
    changed.graph.input[1].type.tensor_type.elem_type = onnx.TensorProto.INT32
    _require_same_signature(reference, reference, tiny_pipeline.onnx)
    with pytest.raises(ErnieDeployError, match="changed the graph's inputs/outputs"):
        _require_same_signature(reference, changed, tiny_pipeline.onnx)


def test_cli_convert_int8_keeps_fp32_beside_and_reports_drift(tiny_pipeline, tmp_path, capsys):
    from ernie_deploy.cli import main

    out, common = convert_argv(tiny_pipeline.static.root, tmp_path)
    calibration = tmp_path / "calibration.txt"  # a user's own texts, one per line (blank lines skipped)
    calibration.write_text("\n".join(TEXTS[:6]) + "\n\n", encoding="utf-8")
    static = [*common, "--calibration-data", str(calibration)]
    assert main([*static, "--quantize", "int8"]) == 0  # int8: static scales, calibrated on the file's texts
    assert sorted(p.name for p in out.parent.iterdir()) == [
        "model.fp32.onnx",
        "model.json",
        "model.onnx",
        "parity.json",
    ]
    assert json.loads((out.parent / "model.json").read_text())["precision"] == "int8-static"  # recorded with it
    ops = {n.op_type for n in onnx.load(str(out)).graph.node}
    assert "QuantizeLinear" in ops and not ops & {"MatMulInteger", "DynamicQuantizeLinear"}
    assert "QuantizeLinear" not in {n.op_type for n in onnx.load(str(out.parent / "model.fp32.onnx")).graph.node}
    report = json.loads((out.parent / "parity.json").read_text())
    assert report["ok"] and report["max_abs_diff"] < 1e-4 and report["n"] == len(TEXTS)  # Paddle vs FP32
    assert report["int8"]["ok"] and report["int8"]["n"] == len(TEXTS) and report["int8"]["labels_agree"] >= 0.8
    assert 0 < report["int8"]["max_abs_diff"] < 0.5 and report["int8"]["quantized"][STATIC_OP] >= 6
    assert report["int8"]["scales"] == "static"
    assert report["int8"]["calibration"] == {"n": 6, "method": "minmax", "source": str(calibration)}
    assert "INT8 (static scales) vs FP32" in capsys.readouterr().out

    # int8-dynamic: onnxruntime's dynamic quantization, no calibration.
    assert main([*common, "--quantize", "int8-dynamic"]) == 0
    report = json.loads((out.parent / "parity.json").read_text())
    assert report["int8"]["ok"] and report["int8"]["scales"] == "dynamic" and "calibration" not in report["int8"]
    assert report["int8"]["quantized"]["MatMulInteger"] >= 6
    assert "INT8 (dynamic scales) vs FP32" in capsys.readouterr().out

    # An INT8 model that fails its gate changes nothing; the refused run's report is kept aside.
    assert_refused_convert_changes_nothing(
        [*static, "--quantize", "int8", "--int8-min-agree", "1.01"], out, "int8", capsys
    )

    # Static INT8 without texts to calibrate on, or calibration texts for a run that makes no static model: refused
    # before any work, naming the fix; nothing changes.
    before = {p.name: p.read_bytes() for p in out.parent.iterdir()}
    missing = ["--calibration-data", str(tmp_path / "missing.txt")]
    for argv, problem, fix in (
        ([*common, "--quantize", "int8-static", *missing], "missing.txt does not exist", "--quantize int8-dynamic"),
        ([*static, "--quantize", "int8-dynamic"], "this run makes none", "drop --calibration-data"),
        ([*static], "this run makes none", "add --quantize int8"),
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert problem in err and fix in err, err
    assert {p.name: p.read_bytes() for p in out.parent.iterdir()} == before

    # Back to FP32: the INT8 leftovers go, model.onnx is the FP32 model again.
    assert main(common) == 0
    assert sorted(p.name for p in out.parent.iterdir()) == ["model.json", "model.onnx", "parity.json"]
    assert json.loads((out.parent / "model.json").read_text())["precision"] == "fp32"
    assert "int8" not in json.loads((out.parent / "parity.json").read_text())
    assert "MatMulInteger" not in {n.op_type for n in onnx.load(str(out)).graph.node}


@pytest.mark.integration
@pytest.mark.parametrize("scales", ["static", "dynamic"])
@pytest.mark.parametrize("graph", ["plain", "optimized"])
@pytest.mark.parametrize("name", ["seq_cls_pipeline", "token_cls_pipeline"])
def test_int8_costs_at_most_one_point_on_the_test_split(name, graph, scales, request, tmp_path):
    """FP32 vs INT8 on the whole test split (1,000 THUCNews titles / 5,000 MSRA sentences), scored the way
    `ernie-deploy eval` and the gRPC clients score; for the optimized graph (`convert --optimize --quantize int8`),
    its INT8 copy against the optimized FP32 graph. Static scales are calibrated as `convert` calibrates them: on
    the first DEFAULT_CALIBRATION_N texts of the dev split."""
    from ernie_deploy.evaluate.metrics import score
    from ernie_deploy.evaluate.offline import onnx_predictions
    from ernie_deploy.export.precision import DEFAULT_CALIBRATION_N
    from ernie_deploy.fetch.data import read_split, read_split_file, split_file

    pipeline = request.getfixturevalue(name)
    task, static = pipeline.task, pipeline.static
    fp32, int8 = pipeline.onnx, tmp_path / "model.onnx"
    if graph == "optimized":
        fp32 = tmp_path / "model.fp32.onnx"
        optimize_transformer(pipeline.onnx, fp32)
    if scales == "static":
        dev = read_split(pipeline.data, "dev", task.split_format)[0][:DEFAULT_CALIBRATION_N]
        calibration = Calibration(tuple(dev), static.vocab_file, static.max_seq_len, lowercase=static.do_lower_case)
        summary = quantize_int8_static(fp32, int8, calibration)
        # Plain: 6 weight MatMuls per layer, 2 layers. Optimized: Q, K and V live inside the fused Attention, which
        # only dynamic INT8 quantizes; the attention output and the two FFN MatMuls per layer are left.
        assert summary["quantized"].get(STATIC_OP, 0) >= (12 if graph == "plain" else 6), summary
    elif graph == "plain":
        summary = quantize_int8(fp32, int8)
        assert summary["quantized"].get("MatMulInteger", 0) >= 12, summary  # 6 per layer, 2 layers
    else:
        summary = quantize_int8(fp32, int8)
        assert summary["quantized"].get("QAttention") == 2 and summary["quantized"]["MatMulInteger"] >= 6, summary
    texts, gold = read_split_file(split_file(pipeline.data, "test", task.split_format))
    assert len(texts) == {"seq_cls": 1000, "token_cls": 5000}[task.name]
    reports = {}
    for kind, path in (("fp32", fp32), ("int8", int8)):
        predicted = onnx_predictions(static.spec, path, static.vocab_file, texts)  # read as `build` serves it
        reports[kind] = score(task, texts, gold, predicted, static.labels)
    scores = {kind: r[task.metric] for kind, r in reports.items()}
    print(f"{task.name} ({graph}, {scales}) {task.metric}: FP32 {scores['fp32']:.4f}  INT8 {scores['int8']:.4f}")
    assert scores["fp32"] > (0.7 if task.metric == "accuracy" else 0.5), scores  # a trained model, not noise
    # At most one point lost: on 1,000 texts' accuracy at most 10 texts fewer right (a count); on F1, 0.01 and
    # float rounding. A gain passes.
    assert drop_within(scores["fp32"], scores["int8"], 0.01, n=counted(reports["fp32"])), scores
