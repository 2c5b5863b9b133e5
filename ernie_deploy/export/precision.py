"""Reduced precision: INT8 quantization and FP16 conversion of the FP32 ONNX model.

Both keep the FP32 model's inputs and output exactly, so Triton configs, warmup data and clients do not change
with the precision. Which precisions `convert` serves, and the drift gate each must pass before it may be served
instead of FP32, are in export.drift.
"""

from __future__ import annotations

import contextlib
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ernie_deploy.core.errors import BadCheckpointError, BadOptionsError, ParityError
from ernie_deploy.core.files import atomic_path
from ernie_deploy.serving.encoding import encode_items
from ernie_deploy.serving.runtime import OnnxModel
from ernie_deploy.serving.tokenizer import build_tokenizer

# --- INT8 -------------------------------------------------------------------------------------------------

# What won on the bootstrap models (2 CPU cores, AVX2 without VNNI): INT8 weights for the MatMuls of the plain
# paddle2onnx graph. Quantizing the embedding Gather too, per-channel or 7-bit (reduce_range) weights, QUInt8
# weights were as fast or slower, and no more accurate. On a `convert --optimize` graph the Q/K/V projections live
# inside the fused Attention nodes, so those are quantized too (QAttention): on the seq_cls demo model that made
# INT8 1.08x / 1.15x / 1.16x faster (batch 1 / 8 / 32) than INT8 MatMuls alone; the plain graph has no Attention.
INT8_OP_TYPES = ("MatMul", "Attention")
_QUANTIZED_OPS = ("MatMulInteger", "DynamicQuantizeMatMul", "QAttention", "QGemm", "ConvInteger")


def quantize_int8(
    fp32_onnx: str | Path,
    out_path: str | Path,
    *,
    op_types: tuple[str, ...] = INT8_OP_TYPES,
    per_channel: bool = False,
    reduce_range: bool = False,
    weight_type: str = "qint8",
) -> dict:
    """Dynamic INT8 quantization with onnxruntime (INT8 weights; activations quantized per batch at run time)
    of an FP32 model into out_path. The graph keeps the FP32 model's inputs and output exactly.

    onnxruntime writes a shape-inferred copy next to its input, so it works on a copy in a private temporary
    folder; out_path appears only complete, after a test run. Returns counts of the quantized ops.
    """

    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    fp32_onnx, out_path = Path(fp32_onnx), Path(out_path)
    types = {"qint8": QuantType.QInt8, "quint8": QuantType.QUInt8}
    if weight_type not in types:
        raise BadOptionsError(f"unknown weight type {weight_type!r}", f"use one of {sorted(types)}")

    def run(src, dst):
        quantize_dynamic(
            src,
            dst,
            op_types_to_quantize=list(op_types),
            per_channel=per_channel,
            reduce_range=reduce_range,
            weight_type=types[weight_type],
        )

    def count(model) -> dict[str, int]:
        counts: dict[str, int] = {}
        for node in model.graph.node:
            if node.op_type in _QUANTIZED_OPS:
                counts[node.op_type] = counts.get(node.op_type, 0) + 1
        return counts

    reference = onnx.load(str(fp32_onnx))
    nothing = f"onnxruntime quantized nothing in {fp32_onnx} (op types {list(op_types)})"
    return {"quantized": _quantized_copy(reference, out_path, run, count, nothing)}


def _quantized_copy(reference, out_path: Path, run, count, nothing: str) -> dict[str, int]:
    """`run(src, dst)` (an onnxruntime quantizer, which writes beside its input) on a copy of `reference` in a
    temporary folder; the result must keep the FP32 signature and quantize something (`count(model)`, else the
    problem `nothing`), and appears at out_path only complete, after a test run. Returns its counts."""
    import onnx

    with tempfile.TemporaryDirectory(prefix="ernie-deploy-int8.") as work:
        src, dst = Path(work) / "fp32.onnx", Path(work) / "int8.onnx"
        onnx.save(reference, str(src))
        with _quiet_onnxruntime_tools():
            run(src, dst)
        model = onnx.load(str(dst))
    _require_same_signature(reference, model, out_path)
    counts = count(model)
    if not counts:
        raise BadCheckpointError(nothing, "convert without --quantize")
    with atomic_path(out_path, suffix=".onnx") as tmp:
        onnx.save(model, str(tmp))
        _smoke_run(tmp)
    return counts


# --- INT8, static scales -------------------------------------------------------------------------------------

# What was measured on the demo models and the ERNIE 3.0 nano / medium shapes (docs/BENCHMARKS.md, "INT8: static vs
# dynamic scales"; this 2-core AVX2 CPU without VNNI): static INT8 runs as fast as dynamic INT8 and scores the same.
# - Weight MatMuls only (those dynamic INT8 quantizes): quantizing attention's activation products too was slower
#   (token_cls 1.54x FP32 at batch 1 against 1.82x) and no more accurate.
# - UINT8 activations: INT8 ones ran at 1.16x FP32 (seq_cls, batch 1) against ~2x: onnxruntime's fast u8s8 kernels.
# - MinMax calibration: Percentile and Entropy scored the same (token_cls F1 0.6634 all three), took 5x longer and
#   hold every activation of every calibration text in memory (and need them all of one shape).
# - 256 calibration texts: 1,000 scored the same (0.6637 against 0.6634 F1) at 4x the time.
# - QOperator format (QLinearMatMul): a text's logits are bit-identical whatever its batch companions and their
#   number; with QDQ, onnxruntime's fused MatMulIntegerToFloat moved them by up to 4e-6 with the parity of the batch's
#   row count. Speed: within this host's noise of QDQ with the sessions side by side (-7% to +6% per cell), ~8% behind
#   it (13 of 16 cells) with each session timed alone.
DEFAULT_CALIBRATION_N = 256
DEFAULT_QUANT_FORMAT = "qoperator"


@dataclass(frozen=True)
class Calibration:
    """The texts whose activations fix a static INT8 model's scales, tokenized as the served model's inputs are."""

    texts: tuple  # str, or (text, text_pair) for pair models
    vocab_file: Path
    max_seq_len: int
    lowercase: bool | None = None
    source: str = ""  # where the texts came from, for parity.json and the log

    def feeds(self):
        """One feed per text, each text alone: no padding, so the recorded ranges are those of real tokens only
        (a served batch's padding positions may then clip, which changes nothing: attention masks them out and
        every other op is per token)."""

        tokenizer = build_tokenizer(self.vocab_file, lowercase=self.lowercase)
        for text in self.texts:
            enc = encode_items(tokenizer, [text], self.max_seq_len)
            yield {"input_ids": enc.input_ids, "token_type_ids": enc.token_type_ids}


def _activation_matmuls(model) -> list[str]:
    """MatMuls whose both inputs are activations (attention's QK^T and its weights x V)."""
    weights = {i.name for i in model.graph.initializer}
    producers = {o: n for n in model.graph.node for o in n.output}

    def constant(name: str) -> bool:
        node = producers.get(name)
        # a weight may sit behind a Transpose / Cast / Identity / Reshape of an initializer
        while node is not None and node.op_type in ("Transpose", "Cast", "Identity", "Reshape") and node.input:
            name, node = node.input[0], producers.get(node.input[0])
        return name in weights or (node is not None and node.op_type == "Constant")

    return [n.name for n in model.graph.node if n.op_type == "MatMul" and not constant(n.input[1])]


def quantize_int8_static(
    fp32_onnx: str | Path,
    out_path: str | Path,
    calibration: Calibration,
    *,
    quant_format: str = DEFAULT_QUANT_FORMAT,
    weights_only: bool = True,
) -> dict:
    """Static INT8 quantization with onnxruntime: INT8 MatMul weights and UINT8 activations at fixed per-tensor
    scales, calibrated once (MinMax) on `calibration`'s texts, so a text's answer does not depend on the texts it
    is batched with (dynamic INT8 scales each batch by its own range). `weights_only`: only the MatMuls with a weight
    input (those dynamic INT8 quantizes), not attention's activation products. The graph keeps the FP32 model's
    inputs and output exactly; out_path appears only complete, after a test run. Returns counts of the quantized
    ops and what it was calibrated on."""
    import onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    fp32_onnx, out_path = Path(fp32_onnx), Path(out_path)
    formats = {"qdq": QuantFormat.QDQ, "qoperator": QuantFormat.QOperator}
    if quant_format not in formats:
        raise BadOptionsError(f"unknown quantization format {quant_format!r}", f"use one of {', '.join(formats)}")
    if not calibration.texts:
        raise BadOptionsError(
            "static INT8 needs calibration texts and got none",
            "pass texts like those the model will serve (--calibration-data), or --quantize int8-dynamic",
        )

    class Texts(CalibrationDataReader):
        def __init__(self):
            self.feeds = calibration.feeds()

        def get_next(self):
            return next(self.feeds, None)

    reference = onnx.load(str(fp32_onnx))
    excluded = _activation_matmuls(reference) if weights_only else []

    def run(src, dst):
        quantize_static(
            src,
            dst,
            Texts(),
            quant_format=formats[quant_format],
            op_types_to_quantize=["MatMul"],
            per_channel=False,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            nodes_to_exclude=excluded,
            calibrate_method=CalibrationMethod.MinMax,
            # QDQ: a MatMul's float output feeds float ops (Add, LayerNorm), so no requantization after it. Not
            # CalibMaxIntermediateOutputs: onnxruntime 1.32 drops each full chunk of outputs uncounted (MinMax
            # keeps two numbers per tensor and text anyway).
            extra_options={"OpTypesToExcludeOutputQuantization": ["MatMul"]},
        )

    counts = _quantized_copy(reference, out_path, run, _static_counts, f"onnxruntime quantized nothing in {fp32_onnx}")
    return {
        "quantized": counts,
        "scales": "static",
        "calibration": {"n": len(calibration.texts), "method": "minmax", "source": calibration.source},
    }


def _static_counts(model) -> dict[str, int]:
    """QOperator: the quantized ops; QDQ: the MatMuls whose inputs are dequantized (onnxruntime fuses each into an
    integer MatMul when it loads the model)."""
    producers = {o: n for n in model.graph.node for o in n.output}
    counts: dict[str, int] = {}
    for node in model.graph.node:
        kind = node.op_type
        if kind == "MatMul" and all(
            producers.get(i) is not None and producers[i].op_type == "DequantizeLinear" for i in node.input
        ):
            kind = "MatMul (QDQ)"
        elif kind not in ("QLinearMatMul", "MatMulIntegerToFloat"):
            continue
        counts[kind] = counts.get(kind, 0) + 1
    return counts


@contextlib.contextmanager
def _quiet_onnxruntime_tools():
    """Hide the quantizer's warnings below ERROR, chiefly its advice to run its pre-processing first (measured:
    no speed or accuracy gain here, and its symbolic shape inference fails on paddle2onnx graphs). It logs
    through the root logger, which other libraries configure, hence the global switch."""
    import logging

    before = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(before)


def _signature(model) -> list[tuple]:
    def dims(value):
        return tuple(d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim)

    return [
        (kind, v.name, v.type.tensor_type.elem_type, dims(v))
        for kind, values in (("input", model.graph.input), ("output", model.graph.output))
        for v in values
    ]


def _require_same_signature(
    reference, candidate, path: Path, kind: str = "INT8", fix: str = "convert without --quantize and report this model"
) -> None:
    """Triton's config and every client read names, types and dims from the file: they must not move."""
    if _signature(reference) != _signature(candidate):
        raise ParityError(
            f"the {kind} model for {path} changed the graph's inputs/outputs: "
            f"{_signature(reference)} -> {_signature(candidate)}",
            fix,
        )


def _smoke_run(path: Path) -> None:
    """Load and run the model once with the CPU provider, the way the model step will, asking for every output it
    declares (a classifier's logits, a UIE model's two probabilities: `_require_same_signature` held them to the FP32
    model's before this run)."""

    ids = np.array([[1, 5, 6, 2, 0]], np.int64)
    OnnxModel(path, outputs=()).run(ids, np.zeros_like(ids))


# --- FP16 ---------------------------------------------------------------------------------------------------

# FP16 is for GPUs: onnxruntime's CPU provider has few FP16 kernels and runs the rest through casts, so on CPU it
# is slower than FP32 (bootstrap models, batch 64, 2 threads: 0.92x seq_cls, 0.93x token_cls). Inputs and outputs
# stay FP32 (ids INT64, logits FP32): Triton configs, warmup data and clients do not change with the precision.
# Measured FP16-vs-FP32 drift on the bootstrap models' whole test splits: max abs logit diff 0.013 (seq_cls,
# 1,000 texts, all labels equal) and 0.028 (token_cls, 5,000 texts, 99.99% of tokens equal).


def convert_fp16(fp32_onnx: str | Path, out_path: str | Path) -> dict:
    """An FP16 copy of an FP32 model into out_path (atomically), with FP32 inputs and outputs.

    paddle2onnx's own converter (a binding of its C++ pass) is used: it is already a pinned dependency, and its
    output loads in onnxruntime, while onnxconverter-common 1.16's `convert_float_to_float16(keep_io_types=True)`
    left paddle2onnx's Cast-to-float nodes declaring FP16 outputs, which onnxruntime refuses to load. The binding
    reports failures only in its log (it even writes a file from an unreadable input), so the result is checked
    here: it must parse, pass the ONNX checker, keep the FP32 model's signature, hold FP16 weights and run.
    Returns counts of the FP16 and FP32 float initializers.
    """
    import onnx
    from paddle2onnx.paddle2onnx_cpp2py_export import convert_to_fp16

    fp32_onnx, out_path = Path(fp32_onnx), Path(out_path)
    try:
        reference = onnx.load(str(fp32_onnx))
    except Exception as exc:  # noqa: BLE001 - missing, truncated or not ONNX at all
        raise BadCheckpointError(
            f"{fp32_onnx} is not a readable ONNX model: {exc}", "convert the FP32 model again (`ernie-deploy convert`)"
        ) from None
    fix = "serve the FP32 model (convert without --fp16)"
    with atomic_path(out_path, suffix=".onnx") as tmp:
        convert_to_fp16(str(fp32_onnx), str(tmp), False)
        try:
            model = onnx.load(str(tmp))
            onnx.checker.check_model(model)
        except Exception as exc:  # noqa: BLE001 - any failure here means the converter produced no usable model
            raise BadCheckpointError(
                f"paddle2onnx's FP16 conversion of {fp32_onnx} produced no valid model: {exc}", fix
            ) from None
        _require_same_signature(reference, model, out_path, "FP16", fix)
        counts = {"fp16_initializers": 0, "fp32_initializers": 0}
        for init in model.graph.initializer:
            if init.data_type == onnx.TensorProto.FLOAT16:
                counts["fp16_initializers"] += 1
            elif init.data_type == onnx.TensorProto.FLOAT:
                counts["fp32_initializers"] += 1
        if not counts["fp16_initializers"]:
            raise BadCheckpointError(f"the FP16 conversion of {fp32_onnx} holds no FP16 weights", fix)
        _smoke_run(tmp)
    return counts
