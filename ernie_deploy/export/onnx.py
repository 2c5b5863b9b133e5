"""Paddle static model -> ONNX with paddle2onnx, tensors named for the pipeline, parity checked against Paddle."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.export.static import StaticModel
from ernie_deploy.core.files import atomic_path
from ernie_deploy.core.tasks import LOGITS, MODEL_INPUTS
from ernie_deploy.export.gates import (
    DEFAULT_FP16_MIN_AGREE,
    DEFAULT_FP16_TOLERANCE,
    DEFAULT_INT8_MIN_AGREE,
    DEFAULT_TOLERANCE,
    Gates,
)

DEFAULT_OPSET = 14  # ORT 1.32 and the NGC containers' ORT backend both run it; 13 lacks some fusions.


def convert(static: StaticModel, out_path: str | Path, *, opset: int = DEFAULT_OPSET) -> Path:
    """Convert with paddle2onnx into out_path (atomically), renaming the output to `logits`."""
    import onnx
    import paddle2onnx

    if opset < 13:
        raise ErnieDeployError(f"opset {opset} is too old", "use --opset 13 or newer")
    out_path = Path(out_path)
    with atomic_path(out_path, suffix=".onnx") as tmp:
        log = io.StringIO()
        # paddle2onnx logs failures instead of raising; keep its chatter and report it if nothing comes out.
        with contextlib.redirect_stdout(log):
            paddle2onnx.export(str(static.model_file), str(static.params_file), str(tmp), opset_version=opset,
                               auto_upgrade_opset=False, enable_onnx_checker=True, optimize_tool="polygraphy")
        if not tmp.exists() or tmp.stat().st_size == 0:
            raise ErnieDeployError(f"paddle2onnx produced no model from {static.model_file}: {log.getvalue()[-800:]}")
        model = onnx.load(str(tmp))
        name_tensors(model)
        onnx.checker.check_model(model)
        onnx.save(model, str(tmp))
    return out_path


def name_tensors(model) -> None:
    """Give the graph the pipeline's tensor names: inputs as exported, the single output as `logits`."""
    inputs = [i.name for i in model.graph.input]
    if sorted(inputs) != sorted(MODEL_INPUTS):
        raise ErnieDeployError(f"the exported graph has inputs {inputs}, expected {list(MODEL_INPUTS)}",
                               "export the model with `ernie-deploy export`, which fixes the input names")
    if len(model.graph.output) != 1:
        raise ErnieDeployError(f"expected one graph output, found {[o.name for o in model.graph.output]}")
    old = model.graph.output[0].name
    if old == LOGITS:
        return
    for node in model.graph.node:
        node.output[:] = [LOGITS if n == old else n for n in node.output]
        node.input[:] = [LOGITS if n == old else n for n in node.input]
    model.graph.output[0].name = LOGITS


@dataclass
class ParityReport:
    n: int
    max_abs_diff: float
    labels_agree: float  # fraction of rows whose argmax matches
    tolerance: float

    @property
    def ok(self) -> bool:
        return self.max_abs_diff <= self.tolerance and self.labels_agree == 1.0

    def to_dict(self) -> dict:
        return {**asdict(self), "ok": self.ok}


def check_parity(static: StaticModel, onnx_path: str | Path, texts: list[str], *, max_seq_len: int = 128,
                 batch_size: int = 32, tolerance: float = 1e-4) -> ParityReport:
    """Run the same batches through Paddle Inference and onnxruntime and compare logits."""
    from ernie_deploy.export.static import PaddlePredictor
    from ernie_deploy.serving.runtime import OnnxModel
    from ernie_deploy.serving.tokenizer import build_tokenizer, encode_batch

    if not texts:
        raise ErnieDeployError("parity check needs at least one text")
    tokenizer = build_tokenizer(static.vocab_file)
    paddle_model, onnx_model = PaddlePredictor(static), OnnxModel(onnx_path)
    worst, agree = 0.0, 0
    for start in range(0, len(texts), batch_size):
        enc = encode_batch(tokenizer, texts[start:start + batch_size], max_seq_len)
        a = paddle_model(enc.input_ids, enc.token_type_ids)
        b = onnx_model(enc.input_ids, enc.token_type_ids)
        worst = max(worst, float(np.max(np.abs(a - b))))
        same = a.argmax(-1) == b.argmax(-1)
        if same.ndim == 2:  # per-token labels: a text agrees when every real token does (padding is ignored)
            same = (same | ~enc.attention_mask.astype(bool)).all(axis=-1)
        agree += int(same.sum())
    return ParityReport(len(texts), worst, agree / len(texts), tolerance)


def require_parity(report: ParityReport, onnx_path: Path) -> None:
    if not report.ok:
        raise ErnieDeployError(
            f"Paddle and ONNX disagree on {onnx_path}: max abs logit diff {report.max_abs_diff:.3g} "
            f"(tolerance {report.tolerance:g}), labels agree on {report.labels_agree:.2%} of {report.n} texts",
            "try another --opset, or convert without optimization; do not serve this model",
        )


# --- INT8 -------------------------------------------------------------------------------------------------

# What won on the bootstrap models (2 CPU cores, AVX2 without VNNI): INT8 weights for the MatMuls of the plain
# paddle2onnx graph. Quantizing the embedding Gather too, per-channel or 7-bit (reduce_range) weights, QUInt8
# weights, and fusing the graph first (onnxruntime's transformer fusions plus Attention, quantized to QAttention)
# were as fast or slower, and no more accurate.
INT8_OP_TYPES = ("MatMul",)
_QUANTIZED_OPS = ("MatMulInteger", "DynamicQuantizeMatMul", "QAttention", "QGemm", "ConvInteger")


def quantize_int8(fp32_onnx: str | Path, out_path: str | Path, *, op_types: tuple[str, ...] = INT8_OP_TYPES,
                  per_channel: bool = False, reduce_range: bool = False, weight_type: str = "qint8") -> dict:
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
    reference = onnx.load(str(fp32_onnx))
    with tempfile.TemporaryDirectory(prefix="ernie-deploy-int8.") as work:
        src, dst = Path(work) / "fp32.onnx", Path(work) / "int8.onnx"
        onnx.save(reference, str(src))
        with _quiet_onnxruntime_tools():
            quantize_dynamic(src, dst, op_types_to_quantize=list(op_types), per_channel=per_channel,
                             reduce_range=reduce_range, weight_type=types[weight_type])
        model = onnx.load(str(dst))
    _require_same_signature(reference, model, out_path)
    counts: dict[str, int] = {}
    for node in model.graph.node:
        if node.op_type in _QUANTIZED_OPS:
            counts[node.op_type] = counts.get(node.op_type, 0) + 1
    if not counts:
        raise ErnieDeployError(f"onnxruntime quantized nothing in {fp32_onnx} (op types {list(op_types)})",
                               "convert without --quantize")
    with atomic_path(out_path, suffix=".onnx") as tmp:
        onnx.save(model, str(tmp))
        _smoke_run(tmp)
    return {"quantized": counts}


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

    return [(kind, v.name, v.type.tensor_type.elem_type, dims(v))
            for kind, values in (("input", model.graph.input), ("output", model.graph.output)) for v in values]


def _require_same_signature(reference, candidate, path: Path, kind: str = "INT8",
                            fix: str = "convert without --quantize and report this model") -> None:
    """Triton's config and every client read names, types and dims from the file: they must not move."""
    if _signature(reference) != _signature(candidate):
        raise ErnieDeployError(f"the {kind} model for {path} changed the graph's inputs/outputs: "
                               f"{_signature(reference)} -> {_signature(candidate)}", fix)


def _smoke_run(path: Path) -> None:
    """Load and run the model once with the CPU provider, the way the model step will."""
    from ernie_deploy.serving.runtime import OnnxModel

    ids = np.array([[1, 5, 6, 2, 0]], np.int64)
    OnnxModel(path)(ids, np.zeros_like(ids))


@dataclass
class Int8Report:
    """INT8 vs its FP32 source on the parity texts: a drift measure, not an equality check."""

    n: int
    labels_agree: float  # fraction of texts whose argmax (every real token's, for token tasks) matches
    max_abs_diff: float
    min_labels_agree: float  # the gate, on texts (classification) or on tokens (token tasks)
    token_labels_agree: float | None = None  # token tasks: fraction of real tokens whose label matches

    @property
    def agreement(self) -> float:
        # One flipped token fails a whole sentence, so long texts would fail a per-text gate on noise.
        return self.labels_agree if self.token_labels_agree is None else self.token_labels_agree

    @property
    def ok(self) -> bool:
        return self.agreement >= self.min_labels_agree

    def to_dict(self) -> dict:
        return {**asdict(self), "ok": self.ok}


def check_int8(vocab_file: str | Path, fp32_onnx: str | Path, int8_onnx: str | Path, texts: list[str], *,
               max_seq_len: int = 128, batch_size: int = 32, min_labels_agree: float = 0.97) -> Int8Report:
    """Run the same batches through the FP32 and the INT8 model; compare labels and logits."""
    n, agree, worst, token_agree = _drift(vocab_file, fp32_onnx, int8_onnx, texts, max_seq_len, batch_size)
    return Int8Report(n, agree, worst, min_labels_agree, token_agree)


def _drift(vocab_file, reference_onnx, candidate_onnx, texts: list[str], max_seq_len: int,
           batch_size: int) -> tuple[int, float, float, float | None]:
    """(texts, fraction of texts whose labels agree, max abs logit diff over real tokens, fraction of real
    tokens whose label agrees or None for classification) of a candidate model against its FP32 source."""
    from ernie_deploy.serving.runtime import OnnxModel
    from ernie_deploy.serving.tokenizer import build_tokenizer, encode_batch

    if not texts:
        raise ErnieDeployError("parity check needs at least one text")
    tokenizer = build_tokenizer(vocab_file)
    reference, candidate = OnnxModel(reference_onnx), OnnxModel(candidate_onnx)
    worst, agree, tokens_same, tokens = 0.0, 0, 0, 0
    for start in range(0, len(texts), batch_size):
        enc = encode_batch(tokenizer, texts[start:start + batch_size], max_seq_len)
        a, b = reference(enc.input_ids, enc.token_type_ids), candidate(enc.input_ids, enc.token_type_ids)
        real = enc.attention_mask.astype(bool)
        worst = max(worst, float(np.max(np.abs(a - b)[real] if a.ndim == 3 else np.abs(a - b))))
        same = a.argmax(-1) == b.argmax(-1)
        if same.ndim == 2:
            tokens_same += int((same & real).sum())
            tokens += int(real.sum())
            same = (same | ~real).all(axis=-1)
        agree += int(same.sum())
    return len(texts), agree / len(texts), worst, tokens_same / tokens if tokens else None


def require_int8(report: Int8Report, int8_onnx: Path) -> None:
    if not report.ok:
        raise ErnieDeployError(
            f"the INT8 model {int8_onnx} agrees with FP32 on {report.agreement:.2%} of the "
            f"{'tokens' if report.token_labels_agree is not None else 'texts'} of {report.n} texts "
            f"(at least {report.min_labels_agree:.0%} required; max abs logit diff {report.max_abs_diff:.3g})",
            "serve the FP32 model (convert without --quantize)",
        )


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
        raise ErnieDeployError(f"{fp32_onnx} is not a readable ONNX model: {exc}",
                               "convert the FP32 model again (`ernie-deploy convert`)") from None
    fix = "serve the FP32 model (convert without --fp16)"
    with atomic_path(out_path, suffix=".onnx") as tmp:
        convert_to_fp16(str(fp32_onnx), str(tmp), False)
        try:
            model = onnx.load(str(tmp))
            onnx.checker.check_model(model)
        except Exception as exc:  # noqa: BLE001 - any failure here means the converter produced no usable model
            raise ErnieDeployError(f"paddle2onnx's FP16 conversion of {fp32_onnx} produced no valid model: {exc}",
                                   fix) from None
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


@dataclass
class Fp16Report:
    """FP16 vs its FP32 source on the parity texts: logits within a tolerance and labels (nearly) the same."""

    n: int
    labels_agree: float  # fraction of texts whose argmax (every real token's, for token tasks) matches
    max_abs_diff: float
    tolerance: float  # the gate on max_abs_diff
    min_labels_agree: float  # the gate on texts (classification) or on tokens (token tasks)
    token_labels_agree: float | None = None

    @property
    def agreement(self) -> float:
        return self.labels_agree if self.token_labels_agree is None else self.token_labels_agree

    @property
    def ok(self) -> bool:
        return self.max_abs_diff <= self.tolerance and self.agreement >= self.min_labels_agree

    def to_dict(self) -> dict:
        return {**asdict(self), "ok": self.ok}


def check_fp16(vocab_file: str | Path, fp32_onnx: str | Path, fp16_onnx: str | Path, texts: list[str], *,
               max_seq_len: int = 128, batch_size: int = 32, tolerance: float = DEFAULT_FP16_TOLERANCE,
               min_labels_agree: float = DEFAULT_FP16_MIN_AGREE) -> Fp16Report:
    """Run the same batches through the FP32 and the FP16 model (onnxruntime, CPU); compare logits and labels."""
    n, agree, worst, token_agree = _drift(vocab_file, fp32_onnx, fp16_onnx, texts, max_seq_len, batch_size)
    return Fp16Report(n, agree, worst, tolerance, min_labels_agree, token_agree)


def require_fp16(report: Fp16Report, fp16_onnx: Path) -> None:
    if not report.ok:
        unit = "tokens" if report.token_labels_agree is not None else "texts"
        raise ErnieDeployError(
            f"the FP16 model {fp16_onnx} drifts from FP32 on {report.n} texts: max abs logit diff "
            f"{report.max_abs_diff:.3g} (tolerance {report.tolerance:g}), labels agree on {report.agreement:.2%} "
            f"of the {unit} (at least {report.min_labels_agree:.0%} required)",
            "serve the FP32 model (convert without --fp16), or raise --fp16-tolerance / lower --fp16-min-agree "
            "if this drift is acceptable",
        )


# --- the whole step: convert, gate, publish -------------------------------------------------------------------

PRECISIONS = ("fp32", "int8", "fp16")
REJECTED_REPORT = "parity.rejected.json"


def convert_checked(static: StaticModel, out: str | Path, *, max_seq_len: int, precision: str = "fp32",
                    gates: Gates = Gates(), opset: int = DEFAULT_OPSET, log=print) -> Path:
    """static model -> `out` (the model `build` serves), gated, with parity.json beside it.

    With precision int8 or fp16, `out` is the reduced model and the FP32 model it came from stays beside it as
    model.fp32.onnx. Everything is made in a staging folder next to `out` and moved in only after every gate
    passed, `out` last: a failed or interrupted run leaves the previous files as they were, and a refused run's
    report is kept as parity.rejected.json (never read by `build`).
    """
    from ernie_deploy.core.files import write_json

    if precision not in PRECISIONS:
        raise ErnieDeployError(f"unknown precision {precision!r}", f"use one of {', '.join(PRECISIONS)}")
    out = Path(out)
    reduced = precision != "fp32"
    fp32 = out.with_name(f"{out.stem}.fp32{out.suffix}")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.stem}.", suffix=".convert.tmp", dir=out.parent))
    s_out, s_fp32, s_parity = staging / out.name, staging / fp32.name, staging / "parity.json"
    texts = list(gates.texts)
    try:
        started = time.perf_counter()
        convert(static, s_fp32 if reduced else s_out, opset=opset)
        log(f"ONNX model {fp32 if reduced else out} ({time.perf_counter() - started:.1f} s)")
        if texts:
            report = check_parity(static, s_fp32 if reduced else s_out, texts, max_seq_len=max_seq_len,
                                  tolerance=gates.tolerance)
            write_json(report.to_dict(), s_parity)
            log(f"parity on {report.n} texts: max abs logit diff {report.max_abs_diff:.2e}, "
                f"labels agree {report.labels_agree:.2%}")
            require_parity(report, fp32 if reduced else out)
        if reduced:
            started = time.perf_counter()
            if precision == "int8":
                info = quantize_int8(s_fp32, s_out)
                made = f"quantized {info['quantized']}"
            else:
                info = convert_fp16(s_fp32, s_out)
                made = f"{info['fp16_initializers']} FP16 weights, {info['fp32_initializers']} FP32"
            log(f"{precision.upper()} model {out} ({time.perf_counter() - started:.1f} s; {made})")
            if texts:
                if precision == "int8":
                    drift = check_int8(static.vocab_file, s_fp32, s_out, texts, max_seq_len=max_seq_len,
                                       min_labels_agree=gates.int8_min_agree)
                    diff = f"max abs logit diff {drift.max_abs_diff:.3f}"
                else:
                    drift = check_fp16(static.vocab_file, s_fp32, s_out, texts, max_seq_len=max_seq_len,
                                       tolerance=gates.fp16_tolerance, min_labels_agree=gates.fp16_min_agree)
                    diff = f"max abs logit diff {drift.max_abs_diff:.3g} (tolerance {drift.tolerance:g})"
                write_json({**report.to_dict(), precision: {**drift.to_dict(), **info}}, s_parity)
                tokens = "" if drift.token_labels_agree is None else f", tokens {drift.token_labels_agree:.2%}"
                log(f"{precision.upper()} vs FP32 on {drift.n} texts: labels agree {drift.labels_agree:.2%}"
                    f"{tokens}, {diff}")
                (require_int8 if precision == "int8" else require_fp16)(drift, out)
    except ErnieDeployError:
        if s_parity.exists():
            os.replace(s_parity, out.parent / REJECTED_REPORT)
            log(f"kept the previous model; this run's report is {out.parent / REJECTED_REPORT}")
        raise
    else:
        # A file this run did not make (the FP32 twin of a now-FP32 model, the report of an unchecked one) no
        # longer describes `out`, so it goes rather than stays.
        names = (fp32.name, "parity.json", out.name)
        made = [name for name in names if (staging / name).exists()]
        for name in made:  # `out` last: `build` never sees a model whose report is not beside it yet
            os.replace(staging / name, out.parent / name)
        for name in (*names, REJECTED_REPORT):
            if name not in made:
                (out.parent / name).unlink(missing_ok=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out
