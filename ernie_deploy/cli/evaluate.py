"""`ernie-deploy eval`: the Paddle and the ONNX model scored offline on a split."""

from __future__ import annotations

from pathlib import Path

from ernie_deploy.cli.arguments import add_model
from ernie_deploy.cli.inputs import TASK_HELP, onnx_file, static_model
from ernie_deploy.core.files import write_json
from ernie_deploy.core.tasks import TASKS
from ernie_deploy.evaluate.offline import evaluate
from ernie_deploy.fetch.data import data_dir, split_file


def register(sub) -> None:
    p = sub.add_parser("eval", help="score the Paddle and the ONNX model offline on a split")
    p.add_argument("--task", choices=sorted(TASKS), help=TASK_HELP)
    add_model(p)
    p.add_argument("--split", default="test", choices=["train", "dev", "test"])
    p.add_argument(
        "--data",
        help="a split file (.tsv for seq_cls, .jsonl for token_cls, .labels.tsv for multi_label) instead of --split",
    )
    p.add_argument("--static", help="default: artifacts/static/<model or task>")
    p.add_argument("--onnx", help="default: artifacts/onnx/<model or task>/model.onnx")
    p.add_argument("--report", help="write the scores as JSON here")
    p.set_defaults(func=run)


def run(args) -> None:

    static = static_model(args.task, args.static, args.model)
    task = static.task
    onnx_path = onnx_file(static, args.onnx, args.model)
    split = Path(args.data or split_file(data_dir(task.dataset), args.split, task.split_format))
    results = evaluate(static.spec, static, onnx_path, split)  # the export's record: read as `build` serves it
    if args.report:
        write_json(results, args.report)
    if "decodings" in results:  # a token model, scored under each NER decoding
        print(f"{'NER decoding':<16}{'paddle ' + task.metric:>12}{'onnx ' + task.metric:>12}")
        for decoding, reports in results["decodings"].items():
            mark = " *" if decoding == results["ner_decoding"] else ""
            print(f"{decoding + mark:<16}{reports['paddle'][task.metric]:>12.4f}{reports['onnx'][task.metric]:>12.4f}")
        print(
            "* recorded with the model: what `build` serves (argmax decodes as PaddleNLP's own pipeline; change it "
            "with `export --ner-decoding` or `build --ner-decoding`)"
        )
    for name in ("paddle", "onnx"):
        report = results[name]
        print(f"{name}: {task.metric}: {report[task.metric]:.4f} (n={report['n']})")
