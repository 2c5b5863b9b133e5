"""`ernie-deploy convert`: static model -> ONNX (paddle2onnx), gated by a Paddle-vs-ONNX parity check."""

from __future__ import annotations

from ernie_deploy.cli.arguments import add_model
from ernie_deploy.cli.inputs import TASK_HELP, options_from, static_model
from ernie_deploy.core.tasks import TASKS
from ernie_deploy.pipeline.convert import convert_model
from ernie_deploy.pipeline.options import QUANTIZE, ConvertOptions

# The flags' defaults are the options' own.
DEFAULTS = ConvertOptions()


def register(sub) -> None:
    p = sub.add_parser("convert", help="static model -> ONNX (paddle2onnx), then a Paddle-vs-ONNX parity check")
    p.add_argument("--task", choices=sorted(TASKS), help=TASK_HELP)
    add_model(p)
    p.add_argument("--static", help="default: artifacts/static/<model or task>")
    p.add_argument("--out", help="default: artifacts/onnx/<model or task>/model.onnx")
    p.add_argument("--opset", type=int, default=DEFAULTS.opset)
    p.add_argument("--tolerance", type=float, default=DEFAULTS.tolerance, help="max abs logit difference allowed")
    p.add_argument(
        "--parity-data",
        help="a split file (.tsv or .jsonl) of texts for the parity check (default: the task's test split)",
    )
    p.add_argument("--parity-n", type=int, default=DEFAULTS.parity_n, help="texts used for the parity check")
    p.add_argument(
        "--dev",
        help="multi-label models: the split file (labels<TAB>text) whose F1 chooses each label's threshold "
        "(default: the task's dev split); written beside the model as thresholds.json",
    )
    p.add_argument("--skip-parity", action="store_true")
    p.add_argument(
        "--optimize",
        action="store_true",
        help="fuse the graph with onnxruntime's transformer optimizer (Attention, SkipLayerNormalization, "
        "BiasGelu) before the parity gate; the fused graph is what parity checks, what --quantize reduces and "
        "what `build` serves. Inputs and output stay as exported",
    )
    p.add_argument(
        "--quantize",
        default=DEFAULTS.quantize,
        choices=list(QUANTIZE),
        help="int8: after the FP32 model passes parity, write an INT8 model (INT8 MatMul weights) to --out, the "
        "model `build` serves, and keep the FP32 one beside it as model.fp32.onnx; INT8-vs-FP32 label agreement "
        'and logit drift go to parity.json under "int8". int8 is int8-static: activation scales fixed once, '
        "calibrated on --calibration-data, so a text's answer does not depend on the texts the server batches it "
        "with. int8-dynamic scales each batch by its own range (no calibration; a near tie's answer can then "
        "depend on its batch companions). An extraction (uie) model takes int8 only: calibrated on its prompted "
        "rows, gated on the spans it extracts (docs/CONVERT.md)",
    )
    p.add_argument(
        "--calibration-data",
        help="with --quantize int8 / int8-static: the texts that fix the activation scales, texts like those the "
        "model will serve: a split file (.tsv or .jsonl) or a .txt file with one text per line (default: the "
        "task's dev split; a model of your own should be given texts of its own domain)",
    )
    p.add_argument(
        "--calibration-n",
        type=int,
        default=DEFAULTS.calibration_n,
        help="with --quantize int8 / int8-static: calibrate on at most this many of those texts (one model run each)",
    )
    p.add_argument(
        "--int8-min-agree",
        type=float,
        default=DEFAULTS.int8_min_agree,
        help="with --quantize int8: least fraction of parity texts (token tasks: of tokens) on which "
        "INT8 and FP32 labels must agree (extraction models: least span F1 of the INT8 model's spans against the "
        "FP32 model's)",
    )
    p.add_argument(
        "--fp16",
        action="store_true",
        help="a GPU option: after the FP32 model passes parity, write an FP16 model (FP32 inputs and "
        "outputs, so configs and clients are unchanged) to --out and keep the FP32 one beside it as "
        'model.fp32.onnx; FP16-vs-FP32 drift goes to parity.json under "fp16". On CPU it runs '
        "slower than FP32; serve it with `build --runtime onnxruntime --device gpu`",
    )
    p.add_argument(
        "--fp16-tolerance",
        type=float,
        default=DEFAULTS.fp16_tolerance,
        help="with --fp16: max abs logit difference allowed against the FP32 model",
    )
    p.add_argument(
        "--fp16-min-agree",
        type=float,
        default=DEFAULTS.fp16_min_agree,
        help="with --fp16: least fraction of parity texts (token tasks: of tokens) on which FP16 and "
        "FP32 labels must agree",
    )
    p.set_defaults(func=run)


def options(args) -> ConvertOptions:
    """The command's options, from its parsed flags (a deployment file's `convert:` fills the same object)."""
    return options_from(ConvertOptions, args)


def run(args) -> None:

    chosen = options(args)  # contradicting flags are refused before the model is read
    static = static_model(args.task, args.static, args.model)
    convert_model(static, chosen, name=args.model, out=args.out, log=print)
