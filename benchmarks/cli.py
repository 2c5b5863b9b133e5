"""`python -m benchmarks` (run by `bash scripts/bench.sh`): this repository's benchmarks, one subcommand per
measurement, which exclude each other:

    run         (the default) every row: in-process limits, INT8 and optimized graphs, Paddle, the default build,
                the ensemble and classic layouts, PaddleNLP SimpleServing, the ERNIE 3.0 sizes; writes bench.json,
                BENCHMARKS.md and the plots into docs/ (--smoke: artifacts/bench-smoke/)
    levers      one served layout per build option, compared (levers.json)
    overload    1x, 2x and 4x the served capacity in an open loop, per queue policy (overload.json)
    cache       the response cache on repeated, half-repeated and unique texts (cache.json)
    input-cost  one text's time and server memory by its length, up to each limit and past it (input_cost.json)
    gateway     the HTTP gateway against direct gRPC, and its SimpleServing route against SimpleServing (gateway.json)
    monitoring  the classifier watched (its answers counted on /metrics) against `build --no-monitor` (monitoring.json)
    scores-cost the classifier that answers every label's probability on request, against the same model built by
                the code from before it could, for clients that do not ask (scores-cost.json)
    render      BENCHMARKS.md and the plots rewritten from a results file, nothing measured
    long-texts  NER on documents longer than the model's window: cut and in windows, scored and timed

The options that say which models and how each cell is measured are `ernie-deploy bench`'s (ernie_deploy.cli.bench).
The earlier spelling of a mode as a flag (`--levers`, `--render FILE`, ...) still parses for one release, with a line
on stderr naming the subcommand.
"""

from __future__ import annotations

import argparse
import sys

from benchmarks.benchmark import run_and_write
from benchmarks.cache import CONCURRENCY, REQUESTS, run_cache
from benchmarks.cli_comparisons import add_comparisons
from benchmarks.cli_shared import add_out, out_folder, research_config
from benchmarks.input_cost import run_input_cost
from benchmarks.levers import pick_levers, run_levers
from benchmarks.long_text import measure, table
from benchmarks.overload import run_overload
from benchmarks.report import render_file
from benchmarks.sizes import prepare_sizes
from ernie_deploy.cli.arguments import add_model, exact_parser
from ernie_deploy.cli.bench import add_arguments, inputs_from_args
from ernie_deploy.cli.inputs import onnx_file, static_model
from ernie_deploy.cli.parse_only import parse_only
from ernie_deploy.core.errors import BadOptionsError, ErnieDeployError
from ernie_deploy.core.files import write_json
from ernie_deploy.core.tasks import TASKS
from ernie_deploy.fetch.data import read_split
from ernie_deploy.fetch.datasets import prepare

PROG = "python -m benchmarks"
MODES = (
    "run",
    "levers",
    "overload",
    "cache",
    "input-cost",
    "gateway",
    "monitoring",
    "scores-cost",
    "render",
    "long-texts",
)
# The flags that chose a mode before the modes were subcommands -> the subcommand.
MODE_FLAGS = {
    "--levers": "levers",
    "--overload": "overload",
    "--cache": "cache",
    "--input-cost": "input-cost",
    "--render": "render",
    "--long-texts": "long-texts",
}


def _add_sizes(p, default: str) -> None:
    p.add_argument(
        "--sizes",
        help="remake the first model in these ERNIE 3.0 shapes (random weights; made once into artifacts/sizes) and "
        "bench them beside it, comma-separated among tiny,nano,micro,mini,medium,base, or `none` "
        f"(default {default})",
    )


def _add_run(sub) -> None:
    p = sub.add_parser("run", help="every row, written into BENCHMARKS.md, bench.json and the plots (the default)")
    add_arguments(p, sorted(TASKS))
    p.add_argument(
        "--classic-repository",
        help="serve this repository for the classic rows (default: build one with `build --classic`)",
    )
    _add_sizes(p, "nano,mini,medium,base; --smoke: tiny")
    p.add_argument("--no-paddle", action="store_true", help="skip the Paddle Inference rows")
    p.add_argument("--no-classic", action="store_true", help="skip the classic rows")
    p.add_argument("--no-ensemble", action="store_true", help="skip the ensemble-layout rows")
    p.add_argument("--no-int8", action="store_true", help="skip the INT8 in-process rows")
    p.add_argument(
        "--no-peer",
        action="store_true",
        help="skip the peer rows (PaddleNLP SimpleServing on the same static model; on by default where paddlenlp "
        "is installed)",
    )
    add_out(p, "bench.json, BENCHMARKS.md and bench.png")
    p.add_argument("--no-plot", action="store_true", help="write no bench.png (matplotlib not needed)")
    p.set_defaults(func=_run)


def _add_measurements(sub) -> None:
    p = sub.add_parser(
        "levers",
        help="serve one layout per build option (ragged, buckets, spinning, threads, instances, queue delay, fused, "
        "classic) and compare their served throughput; writes levers.json",
    )
    add_arguments(p, sorted(TASKS))
    _add_sizes(p, "none")
    p.add_argument(
        "--lever",
        action="append",
        metavar="OPTION",
        help="measure the default and only the levers that set this build option (a BuildOptions field: fused, "
        "graph_postprocess, tokenizer_in_model, ort_threads, ...; repeatable)",
    )
    add_out(p, "levers.json")
    p.set_defaults(func=_levers)
    for name, func, what, text in (
        (
            "overload",
            _overload,
            "overload.json",
            "offer 1x, 2x and 4x the served capacity in an open loop, without and with a bound on the queues "
            "(build --max-queue-size), and report answered and refused shares and latency",
        ),
        (
            "cache",
            _cache,
            "cache.json",
            "the classifier with and without Triton's response cache (build --cache) on one server, for repeated "
            "texts (a Zipf draw over the test titles) and unique ones: hit rate, throughput, latency",
        ),
        (
            "input-cost",
            _input_cost,
            "input_cost.json",
            "the time and server memory of one text by its length (1,000 to 40,000 characters of test texts), per "
            "model, then the default limits (at the limit: answered; one character more: refused)",
        ),
    ):
        p = sub.add_parser(name, help=f"{text}; writes {what}")
        add_arguments(p, sorted(TASKS))
        add_out(p, what)
        p.set_defaults(func=func)


def _add_render(sub) -> None:
    p = sub.add_parser("render", help="only rewrite BENCHMARKS.md and bench.png from a results file")
    p.add_argument("results", metavar="BENCH_JSON", help="a results file (bench.json)")
    p.add_argument("--out", help="folder for BENCHMARKS.md and bench.png (default: beside the results file)")
    p.add_argument("--no-plot", action="store_true", help="write no bench.png (matplotlib not needed)")
    p.set_defaults(func=_render)


def _add_long_texts(sub) -> None:
    p = sub.add_parser(
        "long-texts",
        help="entity F1 and time on msra_docs documents: cut at max_seq_len vs sliding windows, beside sentence F1",
    )
    add_model(p)
    p.add_argument("--static", help="default: artifacts/static/<model or token_cls>")
    p.add_argument("--onnx", help="default: artifacts/onnx/<model or token_cls>/model.onnx")
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
    p.set_defaults(func=_long_texts)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0], allow_abbrev=False)
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="{" + ",".join(MODES) + "}", parser_class=exact_parser
    )
    _add_run(sub)
    _add_measurements(sub)
    add_comparisons(sub)
    _add_render(sub)
    _add_long_texts(sub)
    return parser


def normalized(argv: list[str]) -> list[str]:
    """`argv` with its mode as the subcommand: none given is `run`; a mode given as a flag of earlier releases
    (`--levers`, `--render FILE`) becomes its subcommand, with the line on stderr that names it. Two modes are
    refused: each is a run of its own."""
    if argv and (argv[0] in MODES or argv[0] in ("-h", "--help")):
        return argv
    flags = [a for a in argv if a.split("=", 1)[0] in MODE_FLAGS]
    if len(flags) > 1:
        raise BadOptionsError(
            f"{' and '.join(flags)} are two measurements; each is a run of its own",
            f"run them one after the other: {PROG} {MODE_FLAGS[flags[0].split('=', 1)[0]]} ..., then the next",
        )
    if not flags:
        return ["run", *argv]
    flag, _, value = flags[0].partition("=")
    mode = MODE_FLAGS[flag]
    rest = [a for a in argv if a != flags[0]]
    print(
        f"{PROG}: deprecated: {flag}; write `{mode}` as the first word (bash scripts/bench.sh {mode} ...)",
        file=sys.stderr,
    )
    return [mode, *([value] if value else []), *rest]


def _run(args) -> None:

    config = research_config(args)
    run_and_write(
        inputs_from_args(args, config),
        config,
        out_folder(args),
        plot_png=not args.no_plot,
        repository=args.repository,
        classic_repository=args.classic_repository,
    )


def _levers(args) -> None:

    config = research_config(args)
    levers = pick_levers(args.lever)
    inputs = inputs_from_args(args, config)
    if args.sizes:  # the levers on the classifier remade in these shapes, too (the demo models alone else)
        inputs += prepare_sizes(inputs, config.sizes)
    run_levers(inputs, config, out_folder(args), levers)


def _overload(args) -> None:

    config = research_config(args)
    run_overload(inputs_from_args(args, config), config, out_folder(args))


def _cache(args) -> None:

    config = research_config(args)
    n = args.requests or (64 if args.smoke else REQUESTS)
    concurrency = config.concurrency[0] if args.concurrency else CONCURRENCY
    run_cache(inputs_from_args(args, config), config, out_folder(args), n=n, concurrency=concurrency)


def _input_cost(args) -> None:

    config = research_config(args)
    run_input_cost(inputs_from_args(args, config), config, out_folder(args), smoke=args.smoke)


def _render(args) -> None:

    render_file(args.results, args.out, not args.no_plot)


def _long_texts(args) -> None:

    static = static_model(None if args.static or args.model else "token_cls", args.static, args.model)
    task = static.task
    if not task.kind_facts.reads_windows:
        raise BadOptionsError(
            f"{static.spec.name} is a {task.kind} model, which does not read texts in windows",
            "pass a model that does: a token_cls model",
        )
    sentences = read_split(prepare(task.dataset), "test", task.split_format)
    docs = read_split(prepare("msra_docs"), "test", "jsonl")
    # the export's record with the flags given: without them, the windows `build` serves by default
    model = static.spec.updated(window_size=args.window_size, window_stride=args.window_stride)
    report = measure(
        model,
        static,
        onnx_file(static, args.onnx, args.model),
        sentences,
        docs,
        sweep=tuple(args.sweep),
        served=not args.no_served,
    )
    if args.report:
        write_json(report, args.report)
    print(table(report))


def main(argv: list[str] | None = None) -> int:
    """Parse, run the subcommand; a library error is printed under the subcommand's name and is exit status 2."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(normalized(argv))
        if parse_only():  # ERNIE_DEPLOY_PARSE_ONLY=1 (scripts/bench.sh): the arguments parse; nothing runs
            return 0
        args.func(args)
    except ErnieDeployError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0
