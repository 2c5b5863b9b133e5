"""Paddle static model -> ONNX with paddle2onnx, tensors named for the pipeline, parity checked against Paddle;
and the whole gated step `convert` runs: convert, check, reduce the precision if asked, publish."""

from __future__ import annotations

import contextlib
import io
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from ernie_deploy.core.errors import BadCheckpointError, BadOptionsError, ErnieDeployError, ParityError
from ernie_deploy.core.files import atomic_path, staging_dir, write_json
from ernie_deploy.core.spec import SPEC_FILE, ModelSpec
from ernie_deploy.core.tasks import LOGITS, MODEL_INPUTS
from ernie_deploy.export.drift import ALIASES, REDUCED, canonical, check_drift, gate_batches, require_drift
from ernie_deploy.export.gates import Gates, require_logits_rank
from ernie_deploy.export.optimize import optimize_transformer
from ernie_deploy.export.precision import Calibration
from ernie_deploy.export.static import PaddlePredictor, StaticModel
from ernie_deploy.export.thresholds import dev_thresholds
from ernie_deploy.serving import record_defaults
from ernie_deploy.serving.entities import DECODINGS, batch_entities
from ernie_deploy.serving.multi_label import THRESHOLDS_FILE
from ernie_deploy.serving.runtime import OnnxModel

DEFAULT_OPSET = 14  # ORT 1.32 and the NGC containers' ORT backend both run it; 13 lacks some fusions.


def paddle2onnx_model(model_file: Path, params_file: Path, tmp: Path, opset: int):
    """paddle2onnx of a static model (its program and weights) into `tmp`, loaded back (an onnx.ModelProto), or a
    refusal with paddle2onnx's own log where it made nothing."""
    import onnx
    import paddle2onnx

    if opset < 13:
        raise BadOptionsError(f"opset {opset} is too old", "use --opset 13 or newer")
    log = io.StringIO()
    # paddle2onnx logs failures instead of raising; keep its chatter and report it if nothing comes out.
    with contextlib.redirect_stdout(log):
        paddle2onnx.export(
            str(model_file),
            str(params_file),
            str(tmp),
            opset_version=opset,
            auto_upgrade_opset=False,
            enable_onnx_checker=True,
            optimize_tool="polygraphy",
        )
    if not tmp.exists() or tmp.stat().st_size == 0:
        raise BadCheckpointError(
            f"paddle2onnx produced no model from {model_file}: {log.getvalue()[-800:]}",
            "read paddle2onnx's log above, and export again with the paddle2onnx of the [export] extra",
        )
    return onnx.load(str(tmp))


def convert(static: StaticModel, out_path: str | Path, *, opset: int = DEFAULT_OPSET) -> Path:
    """Convert with paddle2onnx into out_path (atomically), renaming the output to `logits`."""
    import onnx

    out_path = Path(out_path)
    with atomic_path(out_path, suffix=".onnx") as tmp:
        model = paddle2onnx_model(static.model_file, static.params_file, tmp, opset)
        name_tensors(model)
        onnx.checker.check_model(model)
        onnx.save(model, str(tmp))
    # The model's record, completed by this stage: what it made (convert_checked records a reduced precision and the
    # thresholds it chose over this).
    replace(static.spec, precision="fp32").write(out_path.parent)
    return out_path


def name_tensors(model) -> None:
    """Give the graph the pipeline's tensor names: inputs as exported, the single output as `logits`."""
    inputs = [i.name for i in model.graph.input]
    if sorted(inputs) != sorted(MODEL_INPUTS):
        raise BadCheckpointError(
            f"the exported graph has inputs {inputs}, expected {list(MODEL_INPUTS)}",
            "export the model with `ernie-deploy export`, which fixes the input names",
        )
    if len(model.graph.output) != 1:
        raise BadCheckpointError(
            f"expected one graph output, found {[o.name for o in model.graph.output]}",
            "export the model with `ernie-deploy export`, whose graph answers its logits only",
        )
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
    labels_agree: float | None  # fraction of rows whose argmax matches; None: no label head (a vector, a score)
    tolerance: float
    # Token models: the NER decoding recorded with the model (the one `build` serves), and under each decoding
    # (serving.entities.DECODINGS) the fraction of texts whose entities are the same from Paddle and from ONNX.
    # The gate holds the recorded decoding to 1.0; the others are reported.
    ner_decoding: str | None = None
    entities_agree: dict[str, float] | None = None
    # Vector models (Kind.parity_cosine): the least cosine between Paddle's and ONNX's vector for one text, and the
    # least the gate takes.
    min_cosine: float | None = None
    cosine_gate: float | None = None

    @property
    def ok(self) -> bool:
        entities = self.entities_agree is None or self.entities_agree[self.ner_decoding] == 1.0
        vectors = self.cosine_gate is None or self.min_cosine >= self.cosine_gate
        labels = self.labels_agree is None or self.labels_agree == 1.0
        return self.max_abs_diff <= self.tolerance and labels and entities and vectors

    def to_dict(self) -> dict:
        data = asdict(self)
        if self.ner_decoding is None:  # not a token model: no entities
            del data["ner_decoding"], data["entities_agree"]
        if self.cosine_gate is None:  # not a vector model
            del data["min_cosine"], data["cosine_gate"]
        return {**data, "ok": self.ok}

    def summary(self) -> str:
        line = f"parity on {self.n} texts: max abs logit diff {self.max_abs_diff:.2e}"
        if self.labels_agree is not None:
            line += f", labels agree {self.labels_agree:.2%}"
        if self.entities_agree is not None:
            each = ", ".join(
                f"{d}{' (served)' if d == self.ner_decoding else ''} {agree:.2%}"
                for d, agree in self.entities_agree.items()
            )
            line += f", entities agree: {each}"
        if self.cosine_gate is not None:
            line += f", least cosine {self.min_cosine:.7f} (gate {self.cosine_gate})"
        return line


def check_parity(
    model: ModelSpec,
    static: StaticModel,
    onnx_path: str | Path,
    texts: list[str],
    *,
    batch_size: int = 32,
    tolerance: float = 1e-4,
) -> ParityReport:
    """Run the same batches through Paddle Inference (`static`'s files) and onnxruntime and compare logits; for a
    token model, also the entities decoded from each under every NER decoding. The texts are tokenized as `model`'s
    record says the server tokenizes them (its max_seq_len and lowercasing: `gate_batches`)."""

    if model.max_positions and model.max_seq_len > model.max_positions:
        raise BadOptionsError(
            f"max_seq_len {model.max_seq_len} is more than the {model.max_positions} positions of {static.model_file}",
            f"export the model again with --max-seq-len {model.max_positions} or less (its max_position_embeddings)",
        )
    task = model.task_spec
    batches = gate_batches(model, static.vocab_file, texts, batch_size)
    paddle_model, onnx_model = PaddlePredictor(static), OnnxModel(onnx_path)
    worst, agree, cosine = 0.0, 0, 1.0
    gate = task.kind_facts.parity_cosine
    entities_same = dict.fromkeys(DECODINGS, 0) if task.kind_facts.entities else None
    for batch, enc in batches:
        a = paddle_model(enc.input_ids, enc.token_type_ids)
        b = onnx_model(enc.input_ids, enc.token_type_ids)
        require_logits_rank(task, a, static.model_file)
        require_logits_rank(task, b, onnx_path)
        worst = max(worst, float(np.max(np.abs(a - b))))
        if gate is not None:
            cosine = min(cosine, float(np.min(_cosines(a, b))))
        # A label head's answer is its argmax; a vector's or a score's is the values, which the difference holds.
        same = a.argmax(-1) == b.argmax(-1) if task.kind_facts.label_head else np.ones(len(a), dtype=bool)
        if task.logits_rank == 2:  # per-token labels: a text agrees when every real token does (padding is ignored)
            same = (same | ~enc.attention_mask.astype(bool)).all(axis=-1)
        agree += int(same.sum())
        for decoding in entities_same or ():
            pair = [batch_entities(batch, x, enc.lengths, enc.offsets, list(model.labels), decoding) for x in (a, b)]
            entities_same[decoding] += sum(x == y for x, y in zip(*pair))
    if entities_same is None:
        vectors = {"min_cosine": cosine, "cosine_gate": gate} if gate is not None else {}
        agreed = agree / len(texts) if task.kind_facts.label_head else None
        return ParityReport(len(texts), worst, agreed, tolerance, **vectors)
    entities_agree = {decoding: same / len(texts) for decoding, same in entities_same.items()}
    decoding = record_defaults.decoding(model)
    return ParityReport(len(texts), worst, agree / len(texts), tolerance, decoding, entities_agree)


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Each row's cosine between a and b ([n, dim]); two zero vectors agree."""
    norms = np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1)
    dots = (a * b).sum(axis=-1)
    return np.where(norms > 0, dots / np.maximum(norms, 1e-30), 1.0)


def require_parity(report: ParityReport, onnx_path: Path) -> None:
    if not report.ok:
        raise ParityError(
            f"Paddle and ONNX disagree on {onnx_path} over {report.n} texts: max abs logit diff "
            f"{report.max_abs_diff:.3g} (tolerance {report.tolerance:g})"
            + (f", labels agree on {report.labels_agree:.2%}" if report.labels_agree is not None else "")
            + (
                f", least cosine {report.min_cosine:.7f} (gate {report.cosine_gate})"
                if report.cosine_gate is not None
                else ""
            )
            + (
                f", entities ({report.ner_decoding} decoding) on {report.entities_agree[report.ner_decoding]:.2%}"
                if report.entities_agree is not None
                else ""
            ),
            "try another --opset, or convert without optimization; do not serve this model",
        )


# --- the whole step: convert, gate, publish -------------------------------------------------------------------

PRECISIONS = ("fp32", *ALIASES, *REDUCED)
REJECTED_REPORT = "parity.rejected.json"


@dataclass(frozen=True)
class _Gating:
    """What the gates of one convert_checked run share: the model converted (its record, `static.spec`, says how
    the texts are tokenized), the texts they run and their limits, the staged report they write, and where progress
    goes."""

    static: StaticModel
    texts: list[str]
    gates: Gates
    report_path: Path
    log: Callable[[str], object]


def _checked_precision(precision: str, calibration: Calibration | None):
    """The precision's canonical name and its reduction (None for FP32); refuses an unknown precision and a
    calibrated one without calibration texts."""
    if precision not in PRECISIONS:
        raise BadOptionsError(f"unknown precision {precision!r}", f"use one of {', '.join(PRECISIONS)}")
    precision = canonical(precision)
    reduced = REDUCED.get(precision)
    if reduced is not None and reduced.calibrated and calibration is None:
        raise BadOptionsError(
            f"{reduced.label} needs calibration texts",
            "pass texts like those the model will serve (`convert --calibration-data FILE`)",
        )
    return precision, reduced


def _convert_fp32(
    static: StaticModel, target: Path, shown: Path, staging: Path, *, optimize: bool, opset: int, log
) -> dict | None:
    """The FP32 model into `target` (`shown`: where it will be published), through onnxruntime's fusions with
    `optimize`; returns the fused op counts, None without `optimize`."""
    started = time.perf_counter()
    s_raw = staging / "model.raw.onnx"
    convert(static, s_raw if optimize else target, opset=opset)
    log(f"ONNX model {shown} ({time.perf_counter() - started:.1f} s)")
    if not optimize:
        return None

    started = time.perf_counter()
    optimized = optimize_transformer(s_raw, target)
    s_raw.unlink()
    log(f"optimized ({time.perf_counter() - started:.1f} s; fused {optimized['fused']})")
    return optimized


def _gate_parity(gating: _Gating, model: Path, shown: Path, optimized: dict | None) -> dict:
    """The FP32 model's parity with Paddle, written to the report before it is required; returns what was written."""
    report = check_parity(gating.static.spec, gating.static, model, gating.texts, tolerance=gating.gates.tolerance)
    record = {**report.to_dict(), **(optimized or {})}
    write_json(record, gating.report_path)
    gating.log(report.summary())
    require_parity(report, shown)
    return record


def _reduce_checked(
    gating: _Gating, precision: str, reduced, fp32: Path, model: Path, shown: Path, record: dict | None, calibration
) -> None:
    """The reduced model made from the FP32 one into `model` (`shown`: where it will be published); with texts, its
    drift added to the parity `record` in the report before it is required."""
    started = time.perf_counter()
    info = reduced.make(fp32, model, *([calibration] if reduced.calibrated else []))
    gating.log(f"{reduced.label} model {shown} ({time.perf_counter() - started:.1f} s; {reduced.describe(info)})")
    if gating.texts:
        static = gating.static
        drift = check_drift(precision, static.spec, static.vocab_file, fp32, model, gating.texts, gates=gating.gates)
        write_json({**record, reduced.report_key: {**drift.to_dict(), **info}}, gating.report_path)
        gating.log(drift.summary())
        require_drift(drift, shown)


def _write_record(static: StaticModel, precision: str, staging: Path, model: Path, thresholds_dev, *, log) -> None:
    """The model's record into `staging`: its precision and, with a dev split, the per-label thresholds chosen on it
    with the model `build` serves (also written as thresholds.json)."""
    thresholds = None
    if thresholds_dev is not None:
        thresholds = dev_thresholds(static.spec, model, static.vocab_file, thresholds_dev)
        write_json(thresholds, staging / THRESHOLDS_FILE)
        log(f"thresholds chosen on {thresholds_dev}: {thresholds}")
    replace(static.spec, precision=precision, thresholds=thresholds).write(staging)


def _keep_rejected(report_path: Path, out: Path, log) -> None:
    """A refused run's report, if it got that far, kept beside the previous model under a name `build` never reads."""
    if report_path.exists():
        os.replace(report_path, out.parent / REJECTED_REPORT)
        log(f"kept the previous model; this run's report is {out.parent / REJECTED_REPORT}")


def _publish(staging: Path, out: Path, fp32: Path) -> None:
    """Move what this run made from `staging` beside `out`, `out` last, and remove what it did not make."""
    # A file this run did not make (the FP32 twin of a now-FP32 model, the report of an unchecked one) no
    # longer describes `out`, so it goes rather than stays.
    names = (fp32.name, "parity.json", THRESHOLDS_FILE, SPEC_FILE, out.name)
    made = [name for name in names if (staging / name).exists()]
    for name in made:  # `out` last: `build` never sees a model whose report is not beside it yet
        os.replace(staging / name, out.parent / name)
    for name in (*names, REJECTED_REPORT):
        if name not in made:
            (out.parent / name).unlink(missing_ok=True)


def convert_checked(
    static: StaticModel,
    out: str | Path,
    *,
    precision: str = "fp32",
    gates: Gates | None = None,
    opset: int = DEFAULT_OPSET,
    thresholds_dev: str | Path | None = None,
    optimize: bool = False,
    calibration: Calibration | None = None,
    log=print,
) -> Path:
    """static model -> `out` (the model `build` serves), gated, with parity.json beside it. The gates tokenize
    their texts as the static model's record (`static.spec`) says: its max_seq_len, its lowercasing.

    With `thresholds_dev` (a multi-label model's dev split), the per-label thresholds chosen on it with the model
    `build` serves go beside it as thresholds.json, in the same move as the model.

    With precision int8 or fp16, `out` is the reduced model and the FP32 model it came from stays beside it as
    model.fp32.onnx. With `optimize`, the FP32 model is onnxruntime's fused graph (export/optimize.py), and it is
    that graph which must pass the Paddle parity gate and which INT8 / FP16 reduce. Everything is made in a
    staging folder next to `out` and moved in only after every gate passed, `out` last: a failed or interrupted
    run leaves the previous files as they were, and a refused run's report is kept as parity.rejected.json
    (never read by `build`).

    `calibration`: the texts that fix a static INT8 model's activation scales (precision int8-static, and int8,
    which is it); required there, unused otherwise.
    """
    precision, reduced = _checked_precision(precision, calibration)
    gates = gates or Gates()
    out = Path(out)
    fp32 = out.with_name(f"{out.stem}.fp32{out.suffix}")
    with staging_dir(out.parent, f"{out.stem}.convert") as staging:
        s_out, s_fp32, s_parity = staging / out.name, staging / fp32.name, staging / "parity.json"
        # Without a reduction the FP32 model is `out` itself.
        s_model, shown = (s_fp32, fp32) if reduced else (s_out, out)
        gating = _Gating(static, list(gates.texts), gates, s_parity, log)
        try:
            optimized = _convert_fp32(static, s_model, shown, staging, optimize=optimize, opset=opset, log=log)
            record = _gate_parity(gating, s_model, shown, optimized) if gating.texts else None
            if reduced:
                _reduce_checked(gating, precision, reduced, s_fp32, s_out, out, record, calibration)
            _write_record(static, precision, staging, s_out, thresholds_dev, log=log)
        except ErnieDeployError:
            _keep_rejected(s_parity, out, log)
            raise
        _publish(staging, out, fp32)
    return out
