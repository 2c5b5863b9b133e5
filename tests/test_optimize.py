"""`convert --optimize`: onnxruntime's transformer fusions on paddle2onnx ERNIE graphs fuse every attention block,
keep the pipeline's signature, pass the Paddle parity gate, and are what `--quantize int8` reduces."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import onnx
import pytest

from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.export.optimize import optimize_transformer, prepare_for_fusion
from ernie_deploy.serving.runtime import OnnxModel

from .conftest import PARITY_TEXTS, convert_argv, io_signature


def _ops(path) -> Counter:
    return Counter(n.op_type for n in onnx.load(str(path)).graph.node)


def _logits(pipeline, path, texts=PARITY_TEXTS):
    from ernie_deploy.serving.encoding import encode_batch
    from ernie_deploy.serving.tokenizer import build_tokenizer

    enc = encode_batch(build_tokenizer(pipeline.static.vocab_file), texts, 128)
    return OnnxModel(path)(enc.input_ids, enc.token_type_ids)


@pytest.mark.parametrize("name", ["tiny_pipeline", "tiny_token_pipeline"])
def test_every_attention_block_fuses_and_the_signature_stays(name, request, tmp_path):
    pipeline = request.getfixturevalue(name)
    out = tmp_path / "model.onnx"
    summary = optimize_transformer(pipeline.onnx, out)
    raw, fused = _ops(pipeline.onnx), _ops(out)
    assert raw["Softmax"] >= 1 and "Attention" not in raw
    assert fused["Attention"] == raw["Softmax"] and fused["Softmax"] == 0, fused
    assert summary["fused"]["Attention"] == raw["Softmax"] and summary["fused"]["SkipLayerNormalization"] >= 1
    assert io_signature(out) == io_signature(pipeline.onnx)
    # Same logits, padding included: the texts differ in length, so every batch is padded.
    a, b = _logits(pipeline, pipeline.onnx), _logits(pipeline, out)
    assert a.shape == b.shape and float(np.abs(a - b).max()) < 1e-4


def test_the_rewrite_refuses_a_graph_it_does_not_know(tiny_pipeline):
    model = onnx.load(str(tiny_pipeline.onnx))
    for node in model.graph.node:
        if node.op_type == "Equal":  # the mask no longer comes from input_ids
            node.input[0] = "token_type_ids"
    with pytest.raises(ErnieDeployError, match="found 0 attention masks"):
        prepare_for_fusion(model)


def test_cli_convert_optimize_passes_parity_and_keeps_the_signature(tiny_pipeline, tmp_path, capsys):
    from ernie_deploy.cli import main

    out, common = convert_argv(tiny_pipeline.static.root, tmp_path)
    assert main([*common, "--optimize"]) == 0
    assert sorted(p.name for p in out.parent.iterdir()) == ["model.json", "model.onnx", "parity.json"]
    assert io_signature(out) == io_signature(tiny_pipeline.onnx)
    assert _ops(out)["Attention"] >= 1
    report = json.loads((out.parent / "parity.json").read_text())  # Paddle vs the fused graph
    assert report["ok"] and report["max_abs_diff"] < 1e-4 and report["n"] == len(PARITY_TEXTS)
    assert report["fused"]["Attention"] == _ops(out)["Attention"]
    assert "optimized" in capsys.readouterr().out

    # With INT8: the served model is the quantized fused graph, the fused FP32 graph stays beside it. (QAttention:
    # dynamic INT8; static INT8 leaves the fused Attention in FP32, tests/test_quantize.py.)
    assert main([*common, "--optimize", "--quantize", "int8-dynamic"]) == 0
    assert sorted(p.name for p in out.parent.iterdir()) == [
        "model.fp32.onnx",
        "model.json",
        "model.onnx",
        "parity.json",
    ]
    assert io_signature(out) == io_signature(tiny_pipeline.onnx)
    assert _ops(out)["QAttention"] >= 1 and _ops(out.parent / "model.fp32.onnx")["Attention"] >= 1
    report = json.loads((out.parent / "parity.json").read_text())
    assert report["ok"] and report["fused"] and report["int8"]["ok"] and report["int8"]["quantized"]["QAttention"]

    # Without --optimize, the plain graph again.
    assert main(common) == 0
    assert "Attention" not in _ops(out) and "fused" not in json.loads((out.parent / "parity.json").read_text())
