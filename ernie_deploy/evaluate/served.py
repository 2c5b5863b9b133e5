"""The gRPC client scripts (clients/*_grpc_client.py): score a split through the served ensemble, or print the
predictions for a few texts."""

from __future__ import annotations

import argparse
import json
import os
import sys

from ernie_deploy.client.grpc_client import DEFAULT_URL, Client, decode_outputs
from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.files import write_json
from ernie_deploy.core.tasks import TaskSpec


def _print_label(text: str, prediction: str, out: dict, i: int) -> None:
    cut = "\t(truncated: the model read max_seq_len tokens of it)" if _cut(out, i) else ""
    print(f"{prediction}\t{out['confidence'][i, 0]:.4f}\t{text}{cut}")


def _cut(out: dict, i: int) -> bool:
    """Whether the server says text i was cut (a model built before classifiers said so has no `truncated`)."""
    return "truncated" in out and bool(out["truncated"][i, 0])


def _print_entities(text: str, prediction: list[dict], out: dict, i: int) -> None:
    note = "  (truncated: entities past max_seq_len are not found)" if _cut(out, i) else ""
    print(f"{text}{note}")
    print(json.dumps(prediction, ensure_ascii=False, indent=2))


# How `--text` shows one answer, per task kind.
PRINTERS = {"sequence": _print_label, "token": _print_entities}


def main(task: TaskSpec, argv: list[str] | None = None, doc: str | None = None) -> int:
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=DEFAULT_URL, help="Triton gRPC address (default %(default)s)")
    parser.add_argument(
        "--model", default=task.ensemble, help=f"the served model to call, a {task.name} model (default %(default)s)"
    )
    parser.add_argument(
        "--data", help=f"a {task.split_format.upper()} split file (default: the {task.dataset} test split)"
    )
    parser.add_argument("--text", action="append", help="run this text and print the result (repeatable)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--report", help="write the scores as JSON")
    args = parser.parse_args(argv)
    try:
        task = task.named(args.model)
        with Client(task, args.url) as client:
            client.check_ready()
            if args.text:
                out = client.infer(args.text)
                show = PRINTERS[task.kind]
                for i, (text, prediction) in enumerate(zip(args.text, decode_outputs(task, out))):
                    show(text, prediction, out, i)
                return 0
            from ernie_deploy.evaluate.metrics import format_report, score
            from ernie_deploy.fetch.data import data_dir, read_split, read_split_file

            if args.data:
                texts, gold = read_split_file(args.data)
            else:
                texts, gold = read_split(data_dir(task.dataset), "test", task.split_format)
            predicted = client.predict(texts, args.batch_size)
        report = score(task, texts, gold, predicted)
        print(format_report(report))
        if args.report:
            write_json(report, args.report)
        print(f"{task.metric}: {report[task.metric]:.4f} (n={report['n']})")
        return 0
    except ErnieDeployError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (`... | head`): nothing left to say, and no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
