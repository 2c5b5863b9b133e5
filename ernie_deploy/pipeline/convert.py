"""The convert stage over a model: static model -> ONNX, gated by a Paddle-vs-ONNX parity check, then made INT8 or
FP16 if asked, with the calibration texts a static INT8 model needs chosen and checked before any work."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ernie_deploy.core.errors import BadDataError, BadOptionsError
from ernie_deploy.export.drift import canonical
from ernie_deploy.export.gates import DEFAULT_TOLERANCE, Gates
from ernie_deploy.export.onnx import convert_checked
from ernie_deploy.export.precision import Calibration
from ernie_deploy.export.static import StaticModel
from ernie_deploy.export.uie import TOLERANCE, convert_uie_checked
from ernie_deploy.export.uie_int8 import PRECISION as UIE_INT8
from ernie_deploy.export.uie_int8 import PromptCalibration, Reading, convert_uie_int8_checked
from ernie_deploy.fetch.data import data_dir, read_split, read_split_file, split_file, task_texts
from ernie_deploy.pipeline.locate import onnx_file, static_model
from ernie_deploy.pipeline.options import ConvertOptions


def convert_model(
    model: StaticModel | str,
    options: ConvertOptions,
    *,
    name: str | None = None,
    out: str | Path | None = None,
    log: Callable[[str], None] | None = None,
) -> Path:
    """Convert `model` (an exported StaticModel, or the name of one) to ONNX at `out` (default:
    artifacts/onnx/<name or task>/model.onnx), the model `build` serves; returns that path. `name`: the model's name
    where `model` is a StaticModel (default: the task's demo model). `log` takes each line of progress."""

    if isinstance(model, str):
        model, name = static_model(None, None, model), model
    task = model.task
    options.check(task, name)
    if task.kind_facts.staged:  # an extraction model's two heads, gated on prompted rows
        return _convert_extraction(model, options, onnx_file(model, out, name), name, log)
    calibrate = calibration(options, model)
    texts = parity_texts(options, model)
    gates = Gates(
        tuple(texts[: options.parity_n]),
        options.tolerance,
        options.int8_min_agree,
        options.fp16_tolerance,
        options.fp16_min_agree,
    )
    return convert_checked(
        model,
        onnx_file(model, out, name),
        precision=options.precision,
        gates=gates,
        opset=options.opset,
        thresholds_dev=(options.dev or split_file(data_dir(task.dataset), "dev", task.split_format))
        if task.per_label_thresholds
        else None,
        optimize=options.optimize,
        calibration=calibrate,
        log=lambda line: (log or print)(f"{name or task.name}: {line}"),
    )


def _convert_extraction(model: StaticModel, options: ConvertOptions, out: Path, name, log) -> Path:
    """An extraction model (UIE, Kind.staged): both probability heads converted and gated on (prompt, text) rows
    (export.uie); with --quantize int8 (int8-static), made static INT8 on prompted rows of the calibration texts and
    gated on the spans it extracts from the parity texts (export.uie_int8). No thresholds."""

    precision = canonical(options.precision)
    if precision not in ("fp32", UIE_INT8):
        dynamic = precision == "int8-dynamic"
        raise BadOptionsError(
            f"{'--quantize int8-dynamic' if dynamic else '--fp16'}: an extraction model is converted in FP32 or in "
            "INT8 with static scales only: "
            + (
                "its later stages prompt with the spans the first stage found, so dynamic scales, which move with the "
                "other rows of a batch, would change the questions asked as well as the answers"
                if dynamic
                else "FP16 is for GPUs, and the extraction step runs onnxruntime on the CPU"
            ),
            "convert it with --quantize int8 (static scales), or without --quantize and --fp16",
        )
    prefix = f"{name or model.task.name}: "
    # The logits' default tolerance is not a probability's: the heads' own (export.uie.TOLERANCE), unless given.
    tolerance = TOLERANCE if options.tolerance == DEFAULT_TOLERANCE else options.tolerance
    if precision == UIE_INT8:
        texts = calibration(options, model)  # the dev split's (or --calibration-data's), each under every type
        convert_uie_int8_checked(
            model,
            out,
            PromptCalibration(texts.texts, model.vocab_file, Reading.of(model.spec), source=texts.source),
            parity_texts(options, model)[: options.parity_n],
            min_agree=options.int8_min_agree,
            tolerance=tolerance,
            opset=options.opset,
            log=lambda line: (log or print)(prefix + line),
        )
        return out
    convert_uie_checked(
        model, out, tolerance=tolerance, opset=options.opset, log=lambda line: (log or print)(prefix + line)
    )
    # The FP32 twin an earlier INT8 run left beside the model no longer describes it (as export.onnx._publish).
    out.with_name(f"{out.stem}.fp32{out.suffix}").unlink(missing_ok=True)
    return out


def parity_texts(options: ConvertOptions, static: StaticModel) -> list[str]:
    """The texts the parity gates run on: options.parity_data's, else the task's test split's; none with
    skip_parity."""

    if options.skip_parity:
        return []
    task = static.task
    if options.parity_data:
        texts = read_split_file(options.parity_data)[0]
    else:
        texts = read_split(data_dir(task.dataset), "test", task.split_format)[0]
    texts = task_texts(task, texts)
    if not texts or options.parity_n < 1:
        raise BadOptionsError(
            "the parity check has no texts to run",
            "give --parity-data a split with texts and --parity-n >= 1, or --skip-parity",
        )
    return texts


def calibration(options: ConvertOptions, static: StaticModel):
    """What fixes a static INT8 model's activation scales (an export.precision.Calibration): the first
    calibration_n texts of calibration_data, else of the task's dev split; None for the other precisions. Checked
    before any conversion work."""

    task = static.task
    if not options.calibrated:
        return None
    given = options.calibration_data
    path = Path(given) if given else split_file(data_dir(task.dataset), "dev", task.split_format)
    if not path.exists():
        raise BadDataError(
            "static INT8 fixes its activation scales on texts like those the model will serve: "
            + (
                f"--calibration-data {path} does not exist"
                if given
                else f"no --calibration-data given, and {task.name}'s dev split {path} does not exist"
            ),
            "pass texts like those the model will serve (--calibration-data FILE: a .txt with one text per line, "
            "or a .tsv / .jsonl split file), run `ernie-deploy fetch-data` for the demo task's data, or choose "
            "--quantize int8-dynamic (no calibration; a text's answer may then depend on its batch companions)",
        )
    if path.suffix == ".txt":
        texts = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    else:
        texts = read_split_file(path)[0]
    if not texts:
        raise BadDataError(f"{path} holds no texts to calibrate on", "give --calibration-data a file with texts")
    return Calibration(
        tuple(texts[: options.calibration_n]),
        static.vocab_file,
        static.max_seq_len,
        lowercase=static.do_lower_case,
        source=str(path),
    )
