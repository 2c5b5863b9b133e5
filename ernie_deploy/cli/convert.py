"""`ernie-deploy convert`: static model -> ONNX (paddle2onnx), gated by a Paddle-vs-ONNX parity check."""

from __future__ import annotations

from pathlib import Path

from ernie_deploy.cli.inputs import NAME_HELP, TASK_HELP, onnx_file, static_model
from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.tasks import TASKS
from ernie_deploy.export.drift import reduced
from ernie_deploy.export.gates import (
    DEFAULT_FP16_MIN_AGREE,
    DEFAULT_FP16_TOLERANCE,
    DEFAULT_INT8_MIN_AGREE,
    DEFAULT_TOLERANCE,
)
from ernie_deploy.export.onnx import DEFAULT_OPSET
from ernie_deploy.export.precision import DEFAULT_CALIBRATION_N


def register(sub) -> None:
    p = sub.add_parser("convert", help="static model -> ONNX (paddle2onnx), then a Paddle-vs-ONNX parity check")
    p.add_argument("--task", choices=sorted(TASKS), help=TASK_HELP)
    p.add_argument("--name", help=NAME_HELP)
    p.add_argument("--static", help="default: artifacts/static/<name or task>")
    p.add_argument("--out", help="default: artifacts/onnx/<name or task>/model.onnx")
    p.add_argument("--opset", type=int, default=DEFAULT_OPSET)
    p.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE, help="max abs logit difference allowed")
    p.add_argument(
        "--parity-data",
        help="a split file (.tsv or .jsonl) of texts for the parity check (default: the task's test split)",
    )
    p.add_argument("--parity-n", type=int, default=256, help="texts used for the parity check")
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
        default="none",
        choices=["none", "int8", "int8-static", "int8-dynamic"],
        help="int8: after the FP32 model passes parity, write an INT8 model (INT8 MatMul weights) to --out, the "
        "model `build` serves, and keep the FP32 one beside it as model.fp32.onnx; INT8-vs-FP32 label agreement "
        'and logit drift go to parity.json under "int8". int8 is int8-static: activation scales fixed once, '
        "calibrated on --calibration-data, so a text's answer does not depend on the texts the server batches it "
        "with. int8-dynamic scales each batch by its own range (no calibration; a near tie's answer can then "
        "depend on its batch companions)",
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
        default=DEFAULT_CALIBRATION_N,
        help="with --quantize int8 / int8-static: calibrate on at most this many of those texts (one model run each)",
    )
    p.add_argument(
        "--int8-min-agree",
        type=float,
        default=DEFAULT_INT8_MIN_AGREE,
        help="with --quantize int8: least fraction of parity texts (token tasks: of tokens) on which "
        "INT8 and FP32 labels must agree",
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
        default=DEFAULT_FP16_TOLERANCE,
        help="with --fp16: max abs logit difference allowed against the FP32 model",
    )
    p.add_argument(
        "--fp16-min-agree",
        type=float,
        default=DEFAULT_FP16_MIN_AGREE,
        help="with --fp16: least fraction of parity texts (token tasks: of tokens) on which FP16 and "
        "FP32 labels must agree",
    )
    p.set_defaults(func=run)


def run(args) -> None:
    from ernie_deploy.export.gates import Gates
    from ernie_deploy.export.onnx import convert_checked
    from ernie_deploy.fetch.data import data_dir, read_split, read_split_file, split_file

    if args.quantize != "none" and args.fp16:
        raise ErnieDeployError(
            f"--fp16 and --quantize {args.quantize} each turn model.onnx into a reduced-precision copy of "
            "the FP32 model; they do not combine",
            "choose one: --fp16 for GPU serving, --quantize int8 for CPU serving",
        )
    static = static_model(args.task, args.static, args.name)
    task = static.task
    if args.dev and not task.thresholds:
        raise ErnieDeployError(
            f"--dev chooses a multi-label model's thresholds; {args.name or task.name} is a {task.name} model",
            "drop --dev",
        )
    calibrate = calibration(args, static)
    texts: list[str] = []
    if not args.skip_parity:
        if args.parity_data:
            texts = read_split_file(args.parity_data)[0]
        else:
            texts = read_split(data_dir(task.dataset), "test", task.split_format)[0]
        if not texts or args.parity_n < 1:
            raise ErnieDeployError(
                "the parity check has no texts to run",
                "give --parity-data a split with texts and --parity-n >= 1, or --skip-parity",
            )
    gates = Gates(
        tuple(texts[: args.parity_n]), args.tolerance, args.int8_min_agree, args.fp16_tolerance, args.fp16_min_agree
    )
    convert_checked(
        static,
        onnx_file(static, args.out, args.name),
        max_seq_len=task.max_seq_len,
        precision=args.quantize if args.quantize != "none" else "fp16" if args.fp16 else "fp32",
        gates=gates,
        opset=args.opset,
        thresholds_dev=(args.dev or split_file(data_dir(task.dataset), "dev", task.split_format))
        if task.thresholds
        else None,
        optimize=args.optimize,
        calibration=calibrate,
        log=lambda line: print(f"{args.name or task.name}: {line}"),
    )


def calibration(args, static):
    """What fixes a static INT8 model's activation scales: the first --calibration-n texts of --calibration-data,
    else of the task's dev split; None for the other precisions. Checked before any conversion work."""
    from ernie_deploy.export.precision import Calibration
    from ernie_deploy.fetch.data import data_dir, read_split_file, split_file

    task = static.task
    if args.quantize == "none" or not reduced(args.quantize).calibrated:
        if args.calibration_data:
            raise ErnieDeployError(
                "--calibration-data fixes a static INT8 model's scales; this run makes none",
                "drop --calibration-data, or add --quantize int8",
            )
        return None
    if args.calibration_n < 1:
        raise ErnieDeployError(f"--calibration-n {args.calibration_n}: calibration needs at least one text")
    path = (
        Path(args.calibration_data)
        if args.calibration_data
        else split_file(data_dir(task.dataset), "dev", task.split_format)
    )
    if not path.exists():
        raise ErnieDeployError(
            "static INT8 fixes its activation scales on texts like those the model will serve: "
            + (
                f"--calibration-data {path} does not exist"
                if args.calibration_data
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
        raise ErnieDeployError(f"{path} holds no texts to calibrate on", "give --calibration-data a file with texts")
    return Calibration(
        tuple(texts[: args.calibration_n]),
        static.vocab_file,
        task.max_seq_len,
        lowercase=static.do_lower_case,
        source=str(path),
    )
