"""Reduced precision: INT8 quantization and FP16 conversion of the FP32 ONNX model, each checked for how far its
labels and logits drift from the FP32 model on the parity texts before it may be served instead.

Both keep the FP32 model's inputs and output exactly, so Triton configs, warmup data and clients do not change
with the precision. `REDUCED` says, per precision, how its model is made and which gate it must pass.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.files import atomic_path
from ernie_deploy.export.gates import Gates, require_logits_rank
from ernie_deploy.export.static import StaticModel

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
        raise ErnieDeployError(f"unknown weight type {weight_type!r}", f"use one of {sorted(types)}")

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
        raise ErnieDeployError(nothing, "convert without --quantize")
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
        from ernie_deploy.serving.tokenizer import build_tokenizer, encode_items

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
        raise ErnieDeployError(f"unknown quantization format {quant_format!r}", f"use one of {', '.join(formats)}")
    if not calibration.texts:
        raise ErnieDeployError(
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
        raise ErnieDeployError(
            f"the {kind} model for {path} changed the graph's inputs/outputs: "
            f"{_signature(reference)} -> {_signature(candidate)}",
            fix,
        )


def _smoke_run(path: Path) -> None:
    """Load and run the model once with the CPU provider, the way the model step will."""
    from ernie_deploy.serving.runtime import OnnxModel

    ids = np.array([[1, 5, 6, 2, 0]], np.int64)
    OnnxModel(path)(ids, np.zeros_like(ids))


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
        raise ErnieDeployError(
            f"{fp32_onnx} is not a readable ONNX model: {exc}", "convert the FP32 model again (`ernie-deploy convert`)"
        ) from None
    fix = "serve the FP32 model (convert without --fp16)"
    with atomic_path(out_path, suffix=".onnx") as tmp:
        convert_to_fp16(str(fp32_onnx), str(tmp), False)
        try:
            model = onnx.load(str(tmp))
            onnx.checker.check_model(model)
        except Exception as exc:  # noqa: BLE001 - any failure here means the converter produced no usable model
            raise ErnieDeployError(
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
            raise ErnieDeployError(f"the FP16 conversion of {fp32_onnx} holds no FP16 weights", fix)
        _smoke_run(tmp)
    return counts


# --- drift from FP32 ----------------------------------------------------------------------------------------


@dataclass
class DriftReport:
    """A reduced-precision model vs its FP32 source on the parity texts: a drift measure, not an equality check."""

    precision: str  # a key of REDUCED (or an alias of one)
    n: int
    labels_agree: float  # fraction of texts whose argmax (every real token's, for token tasks) matches
    max_abs_diff: float  # over real tokens, for token tasks
    tolerance: float | None  # the gate on max_abs_diff; None where the precision has none (INT8)
    min_labels_agree: float  # the gate, on texts (classification) or on tokens (token tasks)
    token_labels_agree: float | None = None  # token tasks: fraction of real tokens whose label matches

    @property
    def agreement(self) -> float:
        # One flipped token fails a whole sentence, so long texts would fail a per-text gate on noise.
        return self.labels_agree if self.token_labels_agree is None else self.token_labels_agree

    @property
    def ok(self) -> bool:
        within = self.tolerance is None or self.max_abs_diff <= self.tolerance
        # One division (count / total) against a decimal threshold compares in floats as the counts do (297 / 300
        # and 0.99 are the same float); a difference of two scores does not (export.gates.within).
        return within and self.agreement >= self.min_labels_agree

    def to_dict(self) -> dict:
        """What parity.json holds under the precision's name (the precision is the key, not repeated)."""
        data = asdict(self)
        del data["precision"]
        if self.tolerance is None:
            del data["tolerance"]
        return {**data, "ok": self.ok}

    def summary(self) -> str:
        tokens = "" if self.token_labels_agree is None else f", tokens {self.token_labels_agree:.2%}"
        if self.tolerance is None:
            diff = f"max abs logit diff {self.max_abs_diff:.3f}"
        else:
            diff = f"max abs logit diff {self.max_abs_diff:.3g} (tolerance {self.tolerance:g})"
        name = reduced(self.precision).label
        return f"{name} vs FP32 on {self.n} texts: labels agree {self.labels_agree:.2%}{tokens}, {diff}"


def check_drift(
    precision: str,
    static: StaticModel,
    fp32_onnx: str | Path,
    candidate_onnx: str | Path,
    texts: list[str],
    *,
    max_seq_len: int = 128,
    batch_size: int = 32,
    gates: Gates | None = None,
) -> DriftReport:
    """Run the same batches through the FP32 model and its `precision` copy (onnxruntime, CPU); compare labels and
    logits. The gate is the precision's, read from `gates`; labels are per text or per token, as the static
    model's task says."""
    from ernie_deploy.serving.runtime import OnnxModel
    from ernie_deploy.serving.tokenizer import build_tokenizer, encode_items

    tolerance, min_labels_agree = reduced(precision).gate(gates or Gates())
    if not texts:
        raise ErnieDeployError("parity check needs at least one text")
    task = static.task
    per_token = task.logits_rank == 2
    tokenizer = build_tokenizer(static.vocab_file)
    reference, candidate = OnnxModel(fp32_onnx), OnnxModel(candidate_onnx)
    worst, agree, tokens_same, tokens = 0.0, 0, 0, 0
    for start in range(0, len(texts), batch_size):
        enc = encode_items(tokenizer, texts[start : start + batch_size], max_seq_len)
        a, b = reference(enc.input_ids, enc.token_type_ids), candidate(enc.input_ids, enc.token_type_ids)
        require_logits_rank(task, a, fp32_onnx)
        require_logits_rank(task, b, candidate_onnx)
        real = enc.attention_mask.astype(bool)
        worst = max(worst, float(np.max(np.abs(a - b)[real] if per_token else np.abs(a - b))))
        same = a.argmax(-1) == b.argmax(-1)
        if per_token:
            tokens_same += int((same & real).sum())
            tokens += int(real.sum())
            same = (same | ~real).all(axis=-1)
        agree += int(same.sum())
    return DriftReport(
        precision,
        len(texts),
        agree / len(texts),
        worst,
        tolerance,
        min_labels_agree,
        tokens_same / tokens if tokens else None,
    )


def require_drift(report: DriftReport, path: Path) -> None:
    if report.ok:
        return
    name = reduced(report.precision).label
    unit = "tokens" if report.token_labels_agree is not None else "texts"
    if report.tolerance is None:
        problem = (
            f"the {name} model {path} agrees with FP32 on {report.agreement:.2%} of the {unit} of "
            f"{report.n} texts (at least {report.min_labels_agree:.0%} required; max abs logit diff "
            f"{report.max_abs_diff:.3g})"
        )
    else:
        problem = (
            f"the {name} model {path} drifts from FP32 on {report.n} texts: max abs logit diff "
            f"{report.max_abs_diff:.3g} (tolerance {report.tolerance:g}), labels agree on "
            f"{report.agreement:.2%} of the {unit} (at least {report.min_labels_agree:.0%} required)"
        )
    raise ErnieDeployError(problem, reduced(report.precision).fix)


# --- the precisions -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Precision:
    """A precision `convert` can serve instead of FP32: how its model is made from the FP32 one, and its gate."""

    make: Callable[..., dict]  # (FP32 model, out path[, Calibration]) -> what was made, recorded in parity.json
    describe: Callable[[dict], str]  # what was made, in the log's words
    gate: Callable[[Gates], tuple[float | None, float]]  # -> (max abs logit diff allowed or None, least agreement)
    fix: str  # what to do when its model fails the gate
    label: str  # its name in the log and in errors
    report_key: str  # its section of parity.json
    calibrated: bool = False  # `make` takes a Calibration: the texts that fix its activation scales


_INT8_FIX = "serve the FP32 model (convert without --quantize)"


def _describe_int8(info: dict) -> str:
    calibration = info.get("calibration")
    how = f"; scales calibrated on {calibration['n']} texts of {calibration['source']}" if calibration else ""
    return f"quantized {info['quantized']}{how}"


REDUCED: dict[str, Precision] = {
    "int8-static": Precision(
        make=quantize_int8_static,
        describe=_describe_int8,
        gate=lambda gates: (None, gates.int8_min_agree),
        fix=f"{_INT8_FIX}, or calibrate on texts like those it will serve (--calibration-data FILE)",
        label="INT8 (static scales)",
        report_key="int8",
        calibrated=True,
    ),
    "int8-dynamic": Precision(
        make=lambda fp32, out: {**quantize_int8(fp32, out), "scales": "dynamic"},
        describe=_describe_int8,
        gate=lambda gates: (None, gates.int8_min_agree),
        fix=_INT8_FIX,
        label="INT8 (dynamic scales)",
        report_key="int8",
    ),
    "fp16": Precision(
        make=convert_fp16,
        describe=lambda info: f"{info['fp16_initializers']} FP16 weights, {info['fp32_initializers']} FP32",
        gate=lambda gates: (gates.fp16_tolerance, gates.fp16_min_agree),
        fix="serve the FP32 model (convert without --fp16), or raise --fp16-tolerance / lower --fp16-min-agree "
        "if this drift is acceptable",
        label="FP16",
        report_key="fp16",
    ),
}

# `--quantize int8`: the INT8 kind chosen by measurement (docs/BENCHMARKS.md, "INT8: static vs dynamic scales"):
# static scales, so that a text's answer does not depend on the texts the server batches it with.
INT8_DEFAULT = "int8-static"
ALIASES = {"int8": INT8_DEFAULT}


def canonical(precision: str) -> str:
    """A precision's name in REDUCED ("int8" is INT8_DEFAULT); other names are returned as they are."""
    return ALIASES.get(precision, precision)


def reduced(precision: str) -> Precision:
    precision = canonical(precision)
    if precision not in REDUCED:
        names = ", ".join([*ALIASES, *REDUCED])
        raise ErnieDeployError(f"unknown precision {precision!r}", f"use one of {names}")
    return REDUCED[precision]
