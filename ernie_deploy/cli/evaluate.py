"""`ernie-deploy eval`: the Paddle and the ONNX model scored offline on a split."""

from __future__ import annotations

from pathlib import Path

from ernie_deploy.cli.arguments import add_model
from ernie_deploy.cli.inputs import TASK_HELP, onnx_file, static_model
from ernie_deploy.core.files import write_json
from ernie_deploy.core.tasks import TASKS
from ernie_deploy.evaluate.retrieval_offline import evaluate
from ernie_deploy.fetch.data import data_dir, split_file


def register(sub) -> None:
    p = sub.add_parser("eval", help="score the Paddle and the ONNX model offline on a split")
    p.add_argument("--task", choices=sorted(TASKS), help=TASK_HELP)
    add_model(p)
    p.add_argument("--split", default="test", choices=["train", "dev", "test"])
    p.add_argument(
        "--data",
        help="a split file (.tsv for seq_cls, .jsonl for token_cls, .labels.tsv for multi_label, .pairs.tsv for embed "
        "and rerank) instead of --split",
    )
    p.add_argument("--static", help="default: artifacts/static/<model or task>")
    p.add_argument("--onnx", help="default: artifacts/onnx/<model or task>/model.onnx")
    p.add_argument("--report", help="write the scores as JSON here")
    p.add_argument(
        "--embed-model",
        metavar="NAME",
        help="a rerank model: the embed model whose top 20 candidates it re-orders (default: the embed demo model's "
        "artifacts)",
    )
    p.set_defaults(func=run)


def run(args) -> None:

    static = static_model(args.task, args.static, args.model)
    task = static.task
    onnx_path = onnx_file(static, args.onnx, args.model)
    split = Path(args.data or split_file(data_dir(task.dataset), args.split, task.split_format))
    proposer = None
    if task.kind_facts.proposed_by:  # scored over the candidates of a model of the kind that proposes them
        base = static_model(task.kind_facts.proposed_by, None, args.embed_model)
        proposer = (base.spec, base, onnx_file(base, None, args.embed_model))
    results = evaluate(static.spec, static, onnx_path, split, proposer)  # the export's record, read as served
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
