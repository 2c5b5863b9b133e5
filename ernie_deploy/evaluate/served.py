"""The gRPC client scripts (clients/*_grpc_client.py): score a split through the served ensemble, or print the
predictions for a few texts."""

from __future__ import annotations

import argparse
import os
import sys

from ernie_deploy.client.grpc_client import Client, decode_outputs
from ernie_deploy.core.endpoints import DEFAULT_GRPC_URL
from ernie_deploy.core.errors import AccuracyGateError, BadOptionsError, BadRepositoryError, ErnieDeployError
from ernie_deploy.core.files import write_json
from ernie_deploy.core.spec import SPEC_PARAMETER, ModelSpec
from ernie_deploy.core.tasks import DEMO_MODELS, PROBABILITIES, TaskSpec
from ernie_deploy.core.tls import add_tls_arguments, tls_from_args
from ernie_deploy.evaluate import retrieval
from ernie_deploy.evaluate.metrics import kind_evaluate


def build_parser(task: TaskSpec, doc: str | None = None) -> argparse.ArgumentParser:
    """The options of the client script of `task` (`doc`: its --help text)."""
    parser = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    parser.add_argument("--grpc-url", default=DEFAULT_GRPC_URL, help="Triton gRPC address (default %(default)s)")
    parser.add_argument(
        "--model",
        default=DEMO_MODELS[task.name],
        help=f"the served model to call, a {task.name} model (default %(default)s)",
    )
    parser.add_argument(
        "--data", help=f"a {task.split_format.upper()} split file (default: the {task.dataset} test split)"
    )
    parser.add_argument("--text", action="append", help="run this text and print the result (repeatable)")
    if len(task.inputs) > 1:
        parser.add_argument("--text-pair", action="append", help="the second text of each --text, in order")
    for option in task.options:  # what a request may send beside each text (UIE: its schema), the same for every one
        parser.add_argument(
            f"--{option.name}",
            metavar="JSON",
            help=f'sent as each text\'s {option.name!r} input, e.g. \'["人物", {{"公司": ["总部"]}}]\' (default: '
            f"the model's own, from `build --{option.name}`)",
        )
    if PROBABILITIES.name in {o.name for o in task.outputs}:
        parser.add_argument(
            "--all-scores",
            action="store_true",
            help="with --text: print every label's probability under each answer, best first (the model's "
            "`probabilities` output, asked for only then)",
        )
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--report", help="write the scores as JSON")
    parser.add_argument(
        "--min-score",
        type=float,
        help=f"exit 3 (AccuracyGateError) when the split's {task.metric} is below this (a release gate in CI)",
    )
    add_tls_arguments(parser)
    return parser


def client_parser(task: TaskSpec, doc: str | None = None) -> argparse.ArgumentParser:
    """The options of `task`'s client script: a split scored text by text (build_parser), or retrieval's
    (evaluate.retrieval) for a kind scored over a corpus."""
    if task.kind_facts.scored_per_text:
        return build_parser(task, doc)
    return retrieval.client_parser(task, doc)


def served_labels(client: Client) -> list[str]:
    """The served model's label names, in labels.json order, from the record its config carries; [] where the
    server keeps model configs to the admin key, or where the record cannot be read (each probability is then shown
    under its label id). An unreadable record is named on stderr with its fix; the answers stand without it."""
    from tritonclient.utils import InferenceServerException

    try:
        config = client.client.get_model_config(client.model).config
    except InferenceServerException:  # the configs are the admin key's: the ids are all there is to show
        return []
    if SPEC_PARAMETER not in config.parameters:
        return []
    try:
        record = ModelSpec.from_json(config.parameters[SPEC_PARAMETER].string_value, f"{client.model}'s record")
    # OldRecord (another format), unreadable (BadRepositoryError), or of a task or values this version does not know
    except (BadRepositoryError, BadOptionsError) as exc:
        fix = f"; fix: {exc.fix}" if exc.fix else ""
        print(f"warning: {exc.problem}{fix}; each probability is shown under its label id", file=sys.stderr)
        return []
    return list(record.labels)


def all_scores_lines(probabilities, names: list[str]) -> str:
    """One text's probabilities, a label a line, best first: `  <label>\t<probability>`."""
    order = sorted(range(len(probabilities)), key=lambda i: -float(probabilities[i]))
    return "\n".join(f"  {names[i] if i < len(names) else i}\t{float(probabilities[i]):.4f}" for i in order)


def with_options(task: TaskSpec, args, texts: list) -> list:
    """The request items of `texts`: each text alone, or with the options given (`--schema`: the same for each)."""
    given = [getattr(args, option.name) for option in task.options]
    if all(value is None for value in given):
        return texts
    return [(text, *given) for text in texts]


def main(task: TaskSpec, argv: list[str] | None = None, doc: str | None = None) -> int:
    args = build_parser(task, doc).parse_args(argv)
    all_scores = getattr(args, "all_scores", False)
    asked = (PROBABILITIES.name,) if all_scores else ()
    try:
        with Client(task, args.grpc_url, model=args.model, tls=tls_from_args(args), asked=asked) as client:
            client.check_ready()
            if args.text:
                items = with_options(task, args, args.text)
                if len(task.inputs) > 1:
                    pairs = args.text_pair or []
                    if len(pairs) != len(items):
                        raise BadOptionsError(
                            f"{len(items)} --text but {len(pairs)} --text-pair", "give each --text its --text-pair"
                        )
                    items = list(zip(args.text, pairs))
                out = client.infer(items)
                show = kind_evaluate(task).show
                names = served_labels(client) if all_scores else []
                for i, (text, prediction) in enumerate(zip(items, decode_outputs(task, out))):
                    show(text, prediction, out, i)
                    if all_scores:
                        print(all_scores_lines(out[PROBABILITIES.name][i], names))
                return 0
            from ernie_deploy.evaluate.metrics import format_report, score
            from ernie_deploy.fetch.data import data_dir, read_split, read_split_file

            if args.data:
                texts, gold = read_split_file(args.data)
            else:
                texts, gold = read_split(data_dir(task.dataset), "test", task.split_format)
            predicted = client.predict(with_options(task, args, texts), args.batch_size)
        report = score(task, texts, gold, predicted)
        print(format_report(report))
        if args.report:
            write_json(report, args.report)
        print(f"{task.metric}: {report[task.metric]:.4f} (n={report['n']})")
        if args.min_score is not None:
            from ernie_deploy.export.gates import require_at_least

            what = f"{args.model}'s {task.metric} on {args.data or f'the {task.dataset} test split'}"
            require_at_least(report[task.metric], args.min_score, what)
        return 0
    except AccuracyGateError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    except ErnieDeployError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (`... | head`): nothing left to say, and no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
