"""`ernie-deploy long-texts`: NER on documents longer than the model's window, cut and in windows, scored and timed."""

from __future__ import annotations

from ernie_deploy.cli.inputs import NAME_HELP, onnx_file, static_model


def register(sub) -> None:
    p = sub.add_parser(
        "long-texts",
        help="entity F1 and time on msra_docs documents: cut at max_seq_len vs sliding windows, beside sentence F1",
    )
    p.add_argument("--name", help=NAME_HELP)
    p.add_argument("--static", help="default: artifacts/static/<name or token_cls>")
    p.add_argument("--onnx", help="default: artifacts/onnx/<name or token_cls>/model.onnx")
    p.add_argument(
        "--window-size",
        type=int,
        help="tokens per window, [CLS] and [SEP] included (default: as `build` serves it, the length the model "
        "was trained on, else max_seq_len)",
    )
    p.add_argument("--window-stride", type=int, help="default: half a window")
    p.add_argument(
        "--sweep", type=int, nargs="*", default=[], help="also ONNX document F1 and time at these window sizes"
    )
    p.add_argument("--no-served", action="store_true", help="offline rows only (no tritonserver)")
    p.add_argument("--report", help="write the numbers as JSON here")
    p.set_defaults(func=run)


def run(args) -> None:
    from ernie_deploy.bench.long_text import measure, table
    from ernie_deploy.core.errors import ErnieDeployError
    from ernie_deploy.core.files import write_json
    from ernie_deploy.fetch.data import read_split
    from ernie_deploy.fetch.datasets import prepare

    static = static_model(None if args.static or args.name else "token_cls", args.static, args.name)
    task = static.task
    if not task.kind_facts.reads_windows:
        raise ErnieDeployError(
            f"{task.ensemble} is a {task.kind} model, which does not read texts in windows",
            "pass a model that does: a token_cls model",
        )
    sentences = read_split(prepare(task.dataset), "test", task.split_format)
    docs = read_split(prepare("msra_docs"), "test", "jsonl")
    report = measure(
        task,
        static,
        onnx_file(static, args.onnx, args.name),
        sentences,
        docs,
        window=args.window_size or static.spec.window_default,
        stride=args.window_stride,
        sweep=tuple(args.sweep),
        served=not args.no_served,
    )
    if args.report:
        write_json(report, args.report)
    print(table(report))
