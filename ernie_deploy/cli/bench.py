"""`ernie-deploy bench`: served pipeline vs in-process onnxruntime, Paddle and the classic layout."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from ernie_deploy.bench.config import CLIENT_BATCH, BenchConfig, TaskInputs
from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.paths import artifacts_dir
from ernie_deploy.core.tasks import DEFAULT_TASKS, TASKS, get_task
from ernie_deploy.core.tls import add_server_tls_arguments, add_tls_arguments, self_served_tls

LOAD_GENERATORS = ("auto", "python", "perf_analyzer", "both")


def register(sub) -> None:
    p = sub.add_parser(
        "bench",
        help="throughput and latency: served pipeline vs in-process onnxruntime, Paddle "
        "and the classic layout; writes BENCHMARKS.md, bench.json, bench.png",
    )
    add_arguments(p, sorted(TASKS))
    p.set_defaults(func=run)


def _int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise ErnieDeployError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise ErnieDeployError(f"expected positive integers, got {text!r}")
    return values


def _sizes(text: str) -> tuple[str, ...]:
    from ernie_deploy.fetch.shapes import get_shape

    if text.strip() == "none":
        return ()
    return tuple(get_shape(size.strip()).name for size in text.split(",") if size.strip())


def _add_model_arguments(p, task_choices: Sequence[str]) -> None:
    """Which models to measure: tasks' demo models or named ones."""
    p.add_argument(
        "--task", action="append", choices=list(task_choices), help=f"default: {' and '.join(DEFAULT_TASKS)}"
    )
    p.add_argument(
        "--name",
        action="append",
        help="a named model's artifacts (artifacts/static/<name>, artifacts/onnx/<name>) instead of a task's demo "
        "model (repeatable; its rows are labelled with the name)",
    )


def _add_cell_arguments(p) -> None:
    """How each cell is measured: the cells, how long each runs, how many texts."""
    p.add_argument("--concurrency", help="served cells, comma-separated (default 1,4,8,16; --smoke: 1,2)")
    p.add_argument("--batch-sizes", help="in-process cells (default 1,8,16,32,64; --smoke: 1,8)")
    p.add_argument("--duration", type=float, help="seconds per served cell (default 10; --smoke: 1)")
    p.add_argument("--inproc-duration", type=float, help="seconds per in-process cell (default 5; --smoke: 0.3)")
    p.add_argument("--requests", type=int, help="requests per served cell, instead of --duration")
    p.add_argument("--warmup", type=float, help="seconds of warm-up before each cell (default 1)")
    p.add_argument(
        "--client-batch",
        type=int,
        help=f"texts per request of the batched served rows (default {CLIENT_BATCH}; 1: no batched rows)",
    )
    p.add_argument("--texts", type=int, help="use only the first N test texts (default: all)")
    p.add_argument("--smoke", action="store_true", help="a tiny run of every row (seconds; timings mean nothing)")


def _add_source_arguments(p) -> None:
    """Where the models come from: given repositories, artifacts and texts, and the sizes remade beside them."""
    p.add_argument(
        "--repository",
        help="serve this repository for the served rows (default: build one from the "
        "artifacts into a temporary folder)",
    )
    p.add_argument(
        "--classic-repository",
        help="serve this repository for the classic rows (default: build one with `build --classic`)",
    )
    p.add_argument("--static", help="default: artifacts/static/<task> (one --task)")
    p.add_argument("--onnx", help="default: artifacts/onnx/<task>/model.onnx (one --task)")
    p.add_argument("--data", help="a split file of texts (default: the task's test split; one --task)")
    p.add_argument(
        "--sizes",
        help="remake the first model in these ERNIE 3.0 shapes (random weights; made once into artifacts/sizes) and "
        "bench them beside it, comma-separated among tiny,nano,micro,mini,medium,base, or `none` "
        "(default nano,mini,medium,base; --smoke: tiny; with --levers: none unless given)",
    )


def _add_row_arguments(p) -> None:
    """Which rows to leave out, and what drives the served ones."""
    p.add_argument("--no-paddle", action="store_true", help="skip the Paddle Inference rows")
    p.add_argument("--no-classic", action="store_true", help="skip the classic rows")
    p.add_argument("--no-ensemble", action="store_true", help="skip the ensemble-layout rows")
    p.add_argument("--no-int8", action="store_true", help="skip the INT8 in-process rows")
    p.add_argument(
        "--load-generator",
        choices=LOAD_GENERATORS,
        default="auto",
        help="what drives the served rows: perf_analyzer (Triton's C++ load generator; on PATH, or unpacked by "
        "scripts/install_perf_analyzer.sh), the built-in asyncio generator (python), or both, each in turn at every "
        "cell, shown side by side (perf_analyzer's rows primary). auto (default): perf_analyzer when it is "
        "installed, else python. --levers and --overload use the first of them (perf_analyzer stops at a server's "
        "first refusal, so --overload measures refusing policies with python)",
    )
    p.add_argument(
        "--no-peer",
        action="store_true",
        help="skip the peer rows (PaddleNLP SimpleServing on the same static model; on by default where paddlenlp "
        "is installed)",
    )


def _add_output_arguments(p) -> None:
    """Where the results go, and what is written."""
    p.add_argument(
        "--out",
        help="folder for bench.json, BENCHMARKS.md and bench.png (default docs/; --smoke: artifacts/bench-smoke/)",
    )
    p.add_argument(
        "--render", metavar="BENCH_JSON", help="only rewrite BENCHMARKS.md and bench.png from a results file"
    )
    p.add_argument("--no-plot", action="store_true", help="write no bench.png (matplotlib not needed)")


def _add_mode_arguments(p) -> None:
    """The other measurements `bench` runs instead of the benchmark."""
    p.add_argument(
        "--overload",
        action="store_true",
        help="instead: offer 1x, 2x and 4x the served capacity in an open loop, without and with a bound on the "
        "queues (build --max-queue-size), and report answered and refused shares and latency; writes overload.json",
    )
    p.add_argument(
        "--cache",
        action="store_true",
        help="instead: the classifier with and without Triton's response cache (build --cache) on one server, for "
        "repeated texts (a Zipf draw over the test titles) and unique ones: hit rate, throughput, latency; writes "
        "cache.json",
    )
    p.add_argument(
        "--input-cost",
        action="store_true",
        help="instead: the time and server memory of one text by its length (1,000 to 40,000 characters of test "
        "texts), per model, then the default limits (at the limit: answered; one character more: refused); writes "
        "input_cost.json",
    )
    p.add_argument(
        "--levers",
        action="store_true",
        help="instead: serve one layout per build option (ragged, buckets, spinning, threads, instances, "
        "queue delay, fused, classic) and compare their served throughput; writes levers.json",
    )
    p.add_argument(
        "--lever",
        action="append",
        metavar="OPTION",
        help="with --levers: measure the default and only the levers that set this build option (a BuildOptions "
        "field: fused, graph_postprocess, tokenizer_in_model, ort_threads, ...; repeatable)",
    )


def add_arguments(p, task_choices: Sequence[str]) -> None:
    """`bench`'s options, group by group, in the order --help lists them."""
    _add_model_arguments(p, task_choices)
    _add_cell_arguments(p)
    _add_source_arguments(p)
    _add_row_arguments(p)
    _add_output_arguments(p)
    _add_mode_arguments(p)
    # Serve the bench's servers with gRPC over TLS and drive them over TLS (the load generators, perf_analyzer).
    add_server_tls_arguments(p)
    add_tls_arguments(p)


def config_from_args(args) -> BenchConfig:
    base = BenchConfig.smoke() if args.smoke else BenchConfig()
    changes = {}
    if args.concurrency:
        changes["concurrency"] = _int_list(args.concurrency)
    if args.batch_sizes:
        changes["batch_sizes"] = _int_list(args.batch_sizes)
    for name, attr in (
        ("duration", "duration_s"),
        ("inproc_duration", "inproc_duration_s"),
        ("warmup", "warmup_s"),
        ("requests", "requests"),
        ("client_batch", "client_batch"),
        ("texts", "max_texts"),
    ):
        if getattr(args, name) is not None:
            changes[attr] = getattr(args, name)
    if args.sizes:
        changes["sizes"] = _sizes(args.sizes)
    if getattr(args, "repository", None):
        if changes.get("sizes"):
            raise ErnieDeployError(
                "--repository serves a repository built without the size models", "drop --sizes, or --repository"
            )
        changes["sizes"] = ()  # a given repository holds only its own models
    if args.no_paddle:
        changes["paddle"] = False
    if args.no_classic:
        changes["classic"] = False
    if args.no_ensemble:
        changes["ensemble"] = False
    if args.no_int8:
        changes["int8"] = False
    changes.update(load_generator_settings(args.load_generator))
    changes["grpc_tls"], changes["tls"] = self_served_tls(args, "bench")
    if args.no_peer:
        changes["peer"] = False
    return dataclasses.replace(base, **changes)


def load_generator_settings(choice: str) -> dict:
    """BenchConfig's load_generators and perf_analyzer for a --load-generator choice. auto prefers perf_analyzer:
    its client costs the shared cores less per request than the Python generator's (docs/BENCHMARKS.md, load
    generators side by side), and it is the tool Triton users measure with."""
    from ernie_deploy.bench.perf_analyzer import PERF_ANALYZER, PYTHON, find_perf_analyzer, require_perf_analyzer

    if choice == "python":
        return {"load_generators": (PYTHON,), "perf_analyzer": None}
    if choice == "auto":
        binary = find_perf_analyzer()
        return {"load_generators": (PERF_ANALYZER if binary else PYTHON,), "perf_analyzer": binary}
    binary = require_perf_analyzer()
    tools = (PERF_ANALYZER, PYTHON) if choice == "both" else (PERF_ANALYZER,)
    return {"load_generators": tools, "perf_analyzer": binary}


def inputs_from_args(args, config: BenchConfig) -> list[TaskInputs]:
    if getattr(args, "name", None):
        from ernie_deploy.cli.inputs import static_model

        if args.task:
            raise ErnieDeployError("--task and --name pick the models two ways", "pass one of them")
        tasks = [static_model(None, None, name).task.named(name) for name in args.name]
    else:
        tasks = [get_task(name) for name in args.task or DEFAULT_TASKS]
    if (args.static or args.onnx or args.data) and len(tasks) != 1:
        raise ErnieDeployError(
            "--static, --onnx and --data name one model's files", "pass exactly one --task or --name with them"
        )
    return [
        TaskInputs.load(task, static=args.static, onnx=args.onnx, data=args.data, max_texts=config.max_texts)
        for task in tasks
    ]


def _out(args) -> Path:
    return Path(args.out or (artifacts_dir() / "bench-smoke" if args.smoke else "docs"))


def run(args) -> None:
    if args.lever and not args.levers:
        raise ErnieDeployError("--lever picks rows of --levers", "add --levers, or drop --lever")
    if args.overload:
        from ernie_deploy.bench.overload import run_overload

        config = config_from_args(args)
        run_overload(inputs_from_args(args, config), config, _out(args))
    elif args.cache:
        from ernie_deploy.bench.cache import CONCURRENCY, REQUESTS, run_cache

        config = config_from_args(args)
        n = args.requests or (64 if args.smoke else REQUESTS)
        concurrency = config.concurrency[0] if args.concurrency else CONCURRENCY
        run_cache(inputs_from_args(args, config), config, _out(args), n=n, concurrency=concurrency)
    elif args.input_cost:
        from ernie_deploy.bench.input_cost import run_input_cost

        config = config_from_args(args)
        run_input_cost(inputs_from_args(args, config), config, _out(args), smoke=args.smoke)
    elif args.levers:
        from ernie_deploy.bench.levers import pick_levers, run_levers

        config = config_from_args(args)
        levers = pick_levers(args.lever)
        inputs = inputs_from_args(args, config)
        if args.sizes:  # the levers on the classifier remade in these shapes, too (the demo models alone else)
            from ernie_deploy.bench.sizes import prepare_sizes

            inputs += prepare_sizes(inputs, config.sizes)
        run_levers(inputs, config, _out(args), levers)
    elif args.render:
        from ernie_deploy.bench.report import render_file

        render_file(args.render, args.out, not args.no_plot)
    else:
        from ernie_deploy.bench.served import run_and_write

        config = config_from_args(args)
        run_and_write(
            inputs_from_args(args, config),
            config,
            _out(args),
            plot_png=not args.no_plot,
            repository=args.repository,
            classic_repository=args.classic_repository,
        )
