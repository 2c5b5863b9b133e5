"""The reduced precisions `convert` can serve instead of FP32 (`REDUCED`: how each model is made, by
export.precision, and which gate it must pass), and that gate: how far the reduced model's labels and logits drift
from the FP32 model on the parity texts, tokenized as the server tokenizes them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ernie_deploy.core.errors import BadOptionsError, ParityError
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.export.gates import Gates, require_logits_rank
from ernie_deploy.export.precision import convert_fp16, quantize_int8, quantize_int8_static
from ernie_deploy.serving.encoding import encode_items
from ernie_deploy.serving.runtime import OnnxModel
from ernie_deploy.serving.tokenizer import build_tokenizer


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


def gate_batches(model: ModelSpec, vocab_file: str | Path, texts: list, batch_size: int):
    """(texts, Encoded) for each batch of the gate texts, tokenized as the server tokenizes them: cut to the record's
    max_seq_len by the tokenizer step's own code (serving.encoding), lowercased by its do_lower_case (export writes
    it to tokenizer_config.json beside vocab.txt too, where the tokenizer `build` serves reads it). What the parity
    gate (export.onnx) and the drift gate run their models on."""

    if not texts:
        raise BadOptionsError(
            "the parity and drift checks need at least one text", "pass texts like those the model will serve"
        )
    tokenizer = build_tokenizer(vocab_file, lowercase=model.do_lower_case)
    batches = (texts[start : start + batch_size] for start in range(0, len(texts), batch_size))
    return ((batch, encode_items(tokenizer, batch, model.max_seq_len)) for batch in batches)


def check_drift(
    precision: str,
    model: ModelSpec,
    vocab_file: str | Path,
    fp32_onnx: str | Path,
    candidate_onnx: str | Path,
    texts: list[str],
    *,
    batch_size: int = 32,
    gates: Gates | None = None,
) -> DriftReport:
    """Run the same batches (tokenized as `model`'s record says: `gate_batches`) through the FP32 model and its
    `precision` copy (onnxruntime, CPU); compare labels and logits. The gate is the precision's, read from `gates`;
    labels are per text or per token, as the model's task says."""

    tolerance, min_labels_agree = reduced(precision).gate(gates or Gates())
    task = model.task_spec
    per_token = task.logits_rank == 2
    batches = gate_batches(model, vocab_file, texts, batch_size)
    reference, candidate = OnnxModel(fp32_onnx), OnnxModel(candidate_onnx)
    worst, agree, tokens_same, tokens = 0.0, 0, 0, 0
    for _, enc in batches:
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
    raise ParityError(problem, reduced(report.precision).fix)


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
        raise BadOptionsError(f"unknown precision {precision!r}", f"use one of {names}")
    return REDUCED[precision]
