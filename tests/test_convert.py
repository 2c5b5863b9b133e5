"""Export + paddle2onnx conversion + the Paddle-vs-ONNX parity gate."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.tasks import LOGITS, MODEL_INPUTS
from ernie_deploy.export.onnx import check_parity, require_parity

TEXTS = ["国足公布世预赛名单", "股市大涨", "abc 123 新闻", "美元 1.5亿", "体育" * 80]


def test_export_writes_a_pir_static_model(tiny_pipeline):
    static = tiny_pipeline.static
    assert static.model_file.name == "inference.json" and static.params_file.exists()
    assert static.vocab_file.exists() and len(static.labels) == 10


def test_onnx_has_pipeline_names_and_dynamic_axes(tiny_pipeline):
    model = onnx.load(str(tiny_pipeline.onnx))
    assert [i.name for i in model.graph.input] == list(MODEL_INPUTS)
    assert [o.name for o in model.graph.output] == [LOGITS]
    for value in model.graph.input:
        dims = value.type.tensor_type.shape.dim
        assert len(dims) == 2 and not dims[0].HasField("dim_value") and not dims[1].HasField("dim_value")
    assert model.opset_import[0].version >= 13


def test_parity_holds_for_the_converted_model(tiny_pipeline):
    static = tiny_pipeline.static
    report = check_parity(static.spec, static, tiny_pipeline.onnx, TEXTS)
    assert report.ok, report
    assert report.max_abs_diff < 1e-4 and report.n == len(TEXTS)


def test_parity_gate_catches_a_tampered_model(tiny_pipeline, tmp_path):
    model = onnx.load(str(tiny_pipeline.onnx))
    # Perturb the largest float initializer (the embeddings): the logits must move.
    init = max(
        (i for i in model.graph.initializer if i.data_type == onnx.TensorProto.FLOAT), key=lambda i: np.prod(i.dims)
    )
    array = numpy_helper.to_array(init).copy()
    array += np.random.default_rng(0).normal(0, 0.5, array.shape).astype(array.dtype)
    init.CopyFrom(numpy_helper.from_array(array, init.name))
    bad = tmp_path / "model.onnx"
    onnx.save(model, str(bad))
    report = check_parity(tiny_pipeline.static.spec, tiny_pipeline.static, bad, TEXTS)
    assert not report.ok
    with pytest.raises(ErnieDeployError, match="max abs logit diff"):
        require_parity(report, bad)


@pytest.mark.integration
def test_bootstrap_model_parity_on_the_test_split(seq_cls_pipeline):
    from ernie_deploy.fetch.data import read_tsv

    texts, _ = read_tsv(seq_cls_pipeline.data / "test.tsv")
    static = seq_cls_pipeline.static
    report = check_parity(static.spec, static, seq_cls_pipeline.onnx, texts[:256])
    assert report.ok and report.max_abs_diff < 1e-4, report


def _legacy_static_model(root):
    """A legacy-IR `.pdmodel` (the format published PaddleNLP inference models use) with ERNIE's I/O names."""
    import paddle

    paddle.enable_static()
    try:
        with paddle.pir_utils.OldIrGuard():
            main, startup = paddle.static.Program(), paddle.static.Program()
            with paddle.static.program_guard(main, startup):
                ids = paddle.static.data("input_ids", [None, None], "int64")
                types = paddle.static.data("token_type_ids", [None, None], "int64")
                hidden = paddle.static.nn.embedding(ids, size=[64, 16]) + paddle.static.nn.embedding(
                    types, size=[4, 16]
                )
                logits = paddle.static.nn.fc(paddle.mean(hidden, axis=1), 10)
            exe = paddle.static.Executor(paddle.CPUPlace())
            exe.run(startup)
            paddle.static.save_inference_model(str(root / "inference"), [ids, types], [logits], exe, program=main)
    finally:
        paddle.disable_static()
    (root / "vocab.txt").write_text(
        "\n".join(["[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]", *"国足公布世预赛名单"]) + "\n"
    )
    return root


def test_legacy_pdmodel_is_accepted_and_converted(tmp_path):
    from ernie_deploy.core.tasks import SEQ_CLS
    from ernie_deploy.export.onnx import convert
    from ernie_deploy.export.static import export
    from ernie_deploy.fetch.checkpoints import inspect_checkpoint

    checkpoint = inspect_checkpoint(_legacy_static_model(tmp_path / "legacy"))
    assert checkpoint.kind == "static" and checkpoint.model_file.suffix == ".pdmodel"
    static = export(checkpoint, SEQ_CLS, tmp_path / "static", labels=[f"c{i}" for i in range(10)])
    assert static.model_file.name == "inference.pdmodel"
    onnx_path = convert(static, tmp_path / "onnx" / "model.onnx")
    report = check_parity(static.spec.updated(max_seq_len=16), static, onnx_path, ["国足公布世预赛名单", "足球"])
    assert report.ok, report
