"""A UIE model in static INT8: calibrated on prompted rows as they are served, gated on the spans it extracts.

A UIE model reads `[CLS] prompt [SEP] text [SEP]` rows (serving.spans.prompt_rows), so its activation scales are fixed
on such rows: each calibration text under each top-level type of the schema the model answers by default, in the
windows the record reads a long text in, one row a run (no padding). The quantization itself is the classifiers'
(export.precision.quantize_int8_static: INT8 MatMul weights, UINT8 activations at fixed scales, QOperator): both
pointer heads keep their FP32 sigmoid outputs, so the graph's signature, start_prob and end_prob float32
[batch, seq], is the FP32 model's, and a text's spans do not depend on the texts it is batched with.

The gate compares what is served, spans: the INT8 and the FP32 model extract the gate texts with that schema through
serving.spans.extract (the answering step's own code), and the INT8 model's spans, scored against the FP32 model's
(span F1, relations included), must reach `min_agree`. Not the share of (text, type) pairs whose spans are the same:
most pairs of news sentences hold no entity, so a model that finds nothing agrees on most of them (the heads swapped:
94.8% of pairs, span F1 0.0). Probabilities are reported beside it, not gated: a span's probability is its start
times its end probability, and near 0.5 a small move of either crosses the threshold; what such a move costs is the
spans it changes, which the gate counts.

Measured on the demo UIE (demo/uie, 2 x 256, rows of 33 tokens; 2-core host): calibrated on 256 dev texts (1,724
rows under its three types), span F1 on the 5,000-sentence test split 0.7452 against FP32's 0.7450; its spans scored
against FP32's: span F1 0.9937 over the whole split, at least 0.9887 in each of its 19 slices of 256 texts (0.9919 on
the first, the gate's texts); 99.55% of (text, type) pairs and 98.64% of texts keep every span; the largest
probability change of a span both models find: 0.26 (a start or end near 0.5).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from ernie_deploy.core.errors import BadOptionsError, ParityError
from ernie_deploy.core.files import staging_dir, write_json
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.export.gates import DEFAULT_INT8_MIN_AGREE
from ernie_deploy.export.precision import DEFAULT_QUANT_FORMAT, quantize_int8_static
from ernie_deploy.export.static import StaticModel
from ernie_deploy.export.uie import OUTPUTS, TOLERANCE, check_uie_parity, convert_uie
from ernie_deploy.kinds.uie import ENTITY_PROMPTS
from ernie_deploy.serving.record_defaults import windows
from ernie_deploy.serving.runtime import OnnxModel
from ernie_deploy.serving.schema import parse_schema
from ernie_deploy.serving.spans import DEFAULT_POSITION_PROB, extract, prompt_rows
from ernie_deploy.serving.tokenizer import build_tokenizer

PRECISION = "int8-static"
# The least span F1 of the INT8 model's spans against the FP32 model's on the gate texts. The measured floor over
# 256-text slices of the demo's test split is 0.9887 (module docstring), so 0.97 (the classifiers' label agreement,
# export.gates.DEFAULT_INT8_MIN_AGREE, the same `--int8-min-agree`) leaves room for other CPUs' kernels, while a
# model that computes something else falls far below it (the heads swapped: 0.0, tests/test_uie_int8.py).
DEFAULT_MIN_AGREE = DEFAULT_INT8_MIN_AGREE
FIX = (
    "serve the FP32 model (convert without --quantize), or calibrate on texts like those it will serve "
    "(--calibration-data FILE)"
)
# Rows per onnxruntime run in the gate: as the answering step's chunk (kinds/uie/serving.py, ROW_CHUNK).
GATE_CHUNK = 256


@dataclass(frozen=True)
class Reading:
    """How a UIE model reads its texts by default: the top-level types of the schema it answers without one, each a
    prompt, and the windows its record reads a long text in (what `build` serves, serving.record_defaults)."""

    prompts: tuple[str, ...]
    schema: object  # as the record holds it (a name, a list, or a dict to relations)
    row_tokens: int
    stride: int
    position_prob: float
    lowercase: bool | None

    @classmethod
    def of(cls, model: ModelSpec) -> Reading:
        schema = model.schema or list(model.labels) or list(ENTITY_PROMPTS.values())
        size, stride, _ = windows(model)
        prob = DEFAULT_POSITION_PROB if model.position_prob is None else model.position_prob
        prompts = tuple(node.name for node in parse_schema(schema))
        return cls(prompts, schema, size, stride, prob, model.do_lower_case)


@dataclass(frozen=True)
class PromptCalibration:
    """The texts whose prompted rows fix a static INT8 UIE model's activation scales: each text under each of the
    reading's prompts, in its windows, as the served model's rows are (serving.spans.prompt_rows). What
    export.precision.quantize_int8_static reads of a calibration: `texts`, `source` and `feeds`."""

    texts: tuple[str, ...]
    vocab_file: Path
    reading: Reading
    source: str = ""

    def rows(self):
        """Every calibration row (serving.spans.Rows), padded to the longest."""
        tokenizer = build_tokenizer(self.vocab_file, lowercase=self.reading.lowercase)
        reading = self.reading
        return prompt_rows(tokenizer, list(self.texts), list(reading.prompts), reading.row_tokens, reading.stride)

    def feeds(self):
        """One feed per row, each row alone and cut to its own tokens: the recorded ranges are those of real tokens
        only (a served batch's padding may then clip, which changes no real token: attention masks padding out and
        every other op is per token)."""
        rows = self.rows()
        for r, length in enumerate(rows.lengths):
            yield {
                "input_ids": rows.input_ids[r : r + 1, :length],
                "token_type_ids": rows.token_type_ids[r : r + 1, :length],
            }


@dataclass
class SpanDriftReport:
    """An INT8 UIE model against its FP32 source on the gate texts, both read through serving.spans.extract."""

    n: int  # texts
    pairs: int  # (text, top-level type) pairs
    spans_agree: float  # fraction of pairs whose spans (relations included) are the same (reported)
    span_f1: float  # the INT8 model's spans scored against the FP32 model's: the gated measure
    max_abs_diff: float  # start and end probabilities of the first stage's rows, over real tokens (reported)
    min_span_f1: float  # the gate

    @property
    def ok(self) -> bool:
        # One division of counts against a decimal threshold, as the classifiers' agreement (export.drift).
        return self.span_f1 >= self.min_span_f1

    def to_dict(self) -> dict:
        return {**asdict(self), "ok": self.ok}

    def summary(self) -> str:
        return (
            f"INT8 (static scales) vs FP32 on {self.n} texts: span F1 against FP32 {self.span_f1:.4f} (gate "
            f"{self.min_span_f1:g}), spans agree on {self.spans_agree:.2%} of {self.pairs} (text, type) pairs, max "
            f"abs probability diff {self.max_abs_diff:.3f}"
        )


def _flat(answer: dict, above: str = "") -> set[tuple]:
    """Every span of one answer, relations included, as (types from the top, start, end)."""
    out = set()
    for name, spans in answer.items():
        path = f"{above}/{name}"
        for span in spans:
            out.add((path, span["start"], span["end"]))
            out |= _flat(span.get("relations") or {}, f"{path}@{span['start']}:{span['end']}")
    return out


def chunked(model: OnnxModel, chunk: int = GATE_CHUNK) -> Callable:
    """serving.spans' `run(rows)` over an onnxruntime model, `chunk` rows a run (as the answering step runs it)."""

    def run(rows):
        parts = [
            model.run(rows.input_ids[at : at + chunk], rows.token_type_ids[at : at + chunk])
            for at in range(0, len(rows), chunk)
        ]
        return tuple(np.concatenate([p[k] for p in parts]) for k in range(2))

    return run


def check_span_drift(
    fp32_onnx: str | Path,
    candidate_onnx: str | Path,
    vocab_file: str | Path,
    reading: Reading,
    texts: list[str],
    *,
    min_agree: float = DEFAULT_MIN_AGREE,
) -> SpanDriftReport:
    """Both models extract `texts` with the reading's schema, windows and threshold; each (text, top-level type)
    pair's spans compared. The largest probability difference is read on the first stage's rows."""
    if not texts:
        raise BadOptionsError(
            "the INT8 span gate needs texts to compare the models on",
            "pass texts like those the model will serve (--parity-data FILE), or --skip-parity",
        )
    tokenizer = build_tokenizer(vocab_file, lowercase=reading.lowercase)
    models = [OnnxModel(path, outputs=OUTPUTS) for path in (fp32_onnx, candidate_onnx)]
    answers = [
        extract(
            tokenizer,
            texts,
            reading.schema,
            chunked(m),
            max_seq_len=reading.row_tokens,
            stride=reading.stride,
            position_prob=reading.position_prob,
        )
        for m in models
    ]
    same = hit = found = reference = 0
    for a, b in zip(*answers):
        for prompt in reading.prompts:
            x, y = _flat({prompt: a.get(prompt, [])}), _flat({prompt: b.get(prompt, [])})
            same += x == y
            hit, reference, found = hit + len(x & y), reference + len(x), found + len(y)
    rows = prompt_rows(tokenizer, texts, list(reading.prompts), reading.row_tokens, reading.stride)
    real = rows.attention_mask.astype(bool)
    worst = 0.0
    for a, b in zip(chunked(models[0])(rows), chunked(models[1])(rows)):
        worst = max(worst, float(np.max(np.abs(a - b)[real], initial=0.0)))
    pairs = len(texts) * len(reading.prompts)
    f1 = 2 * hit / (reference + found) if reference + found else 1.0
    return SpanDriftReport(len(texts), pairs, same / pairs, f1, worst, min_agree)


def require_span_drift(report: SpanDriftReport, path: Path) -> None:
    if report.ok:
        return
    raise ParityError(
        f"the INT8 (static scales) model {path} finds other spans than FP32 on {report.n} texts: its spans score "
        f"span F1 {report.span_f1:.4f} against FP32's (at least {report.min_span_f1:g} required; "
        f"{1 - report.spans_agree:.2%} of the {report.pairs} (text, type) pairs changed)",
        FIX,
    )


def convert_uie_int8_checked(
    static: StaticModel,
    out: str | Path,
    calibration: PromptCalibration,
    gate_texts: list[str],
    *,
    min_agree: float = DEFAULT_MIN_AGREE,
    tolerance: float = TOLERANCE,
    opset: int | None = None,
    log=print,
) -> dict:
    """static -> FP32 ONNX (Paddle parity gate, export.uie) -> static INT8 at `out` (span gate on `gate_texts`; none
    when empty, as --skip-parity), the FP32 model beside it as model.fp32.onnx, parity.json and the record
    (precision int8-static). Made in a staging folder and moved in only after both gates passed, `out` last; a
    refused run keeps the previous files and leaves its report as parity.rejected.json. Returns parity.json's
    content."""
    out = Path(out)
    fp32 = out.with_name(f"{out.stem}.fp32{out.suffix}")
    rejected = out.parent / "parity.rejected.json"
    with staging_dir(out.parent, f"{out.stem}.uie-int8") as staging:
        s_fp32, s_out, s_report = staging / fp32.name, staging / out.name, staging / "parity.json"
        try:
            started = time.perf_counter()
            convert_uie(static, s_fp32, opset=opset)
            parity = check_uie_parity(static, s_fp32, tolerance=tolerance)
            log(f"ONNX model {fp32} ({time.perf_counter() - started:.1f} s); {parity.summary()}")
            record = parity.to_dict()
            write_json(record, s_report)
            if not parity.ok:
                raise ParityError(
                    f"Paddle and ONNX disagree on {fp32.name}: max abs probability diff {parity.worst:.3g} "
                    f"(tolerance {tolerance:g}) over {parity.n} rows",
                    "convert again with another opset; do not serve this model",
                )
            started = time.perf_counter()
            info = quantize_int8_static(s_fp32, s_out, calibration, quant_format=DEFAULT_QUANT_FORMAT)
            info["calibration"]["rows"] = len(calibration.rows())
            info["calibration"]["prompts"] = list(calibration.reading.prompts)
            log(
                f"INT8 (static scales) model {out} ({time.perf_counter() - started:.1f} s; quantized "
                f"{info['quantized']}; scales calibrated on {info['calibration']['rows']} rows: "
                f"{len(calibration.texts)} texts of {calibration.source} x {len(calibration.reading.prompts)} types)"
            )
            if gate_texts:
                drift = check_span_drift(
                    s_fp32, s_out, static.vocab_file, calibration.reading, gate_texts, min_agree=min_agree
                )
                record["int8"] = {**drift.to_dict(), **info}
                write_json(record, s_report)
                log(drift.summary())
                require_span_drift(drift, out)
            else:
                record["int8"] = info
                write_json(record, s_report)
        except (ParityError, BadOptionsError):
            if s_report.exists():
                os.replace(s_report, rejected)
                log(f"kept the previous model; this run's report is {rejected}")
            raise
        spec = replace(static.spec, precision=PRECISION).write(staging)
        for made in (s_fp32, s_report, spec, s_out):  # the model last: never one without its report and record
            os.replace(made, out.parent / made.name)
    rejected.unlink(missing_ok=True)
    return record
