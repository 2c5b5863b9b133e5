"""`ernie-deploy bench`: a served model timed against its in-process limit (onnxruntime) on this machine.

The argument groups and `config_from_args` are shared with the repository's own benchmarks (benchmarks/cli.py), which
add their modes and rows to them.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from pathlib import Path

from ernie_deploy.bench.config import CLIENT_BATCH, BenchConfig
from ernie_deploy.bench.perf_analyzer import PERF_ANALYZER, PYTHON, find_perf_analyzer, require_perf_analyzer
from ernie_deploy.bench.run import run_and_write
from ernie_deploy.cli.arguments import add_model, add_repository
from ernie_deploy.core.errors import BadOptionsError
from ernie_deploy.core.tasks import DEFAULT_TASKS, DEMO_MODELS, TASKS
from ernie_deploy.core.tls import add_server_tls_arguments, add_tls_arguments, self_served_tls
from ernie_deploy.evaluate.inputs import ModelInputs

LOAD_GENERATORS = ("auto", "python", "perf_analyzer", "both")
# The research flags `bench` took before the benchmarks left the package -> the command of benchmarks/ that runs them.
# They are still parsed, for one release, to name that command instead of failing on an unknown option.
MOVED = {
    "levers": "levers",
    "lever": "levers",
    "overload": "overload",
    "cache": "cache",
    "input_cost": "input-cost",
    "render": "render",
    "sizes": "run",
    "classic_repository": "run",
    "no_paddle": "run",
    "no_classic": "run",
    "no_ensemble": "run",
    "no_int8": "run",
    "no_peer": "run",
    "no_plot": "run",
}


def register(sub) -> None:
    p = sub.add_parser(
        "bench",
        help="throughput and latency of a served model next to its in-process limit on this machine; writes "
        "bench.json and bench.md into artifacts/reports/bench (or --out)",
    )
    add_arguments(p, sorted(TASKS))
    p.add_argument("--out", help="folder for bench.json and bench.md (default artifacts/reports/bench)")
    _add_moved_arguments(p)
    p.set_defaults(func=run)


def _int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise BadOptionsError(f"expected comma-separated integers, got {text!r}", "pass e.g. 1,4,8") from None
    if not values or min(values) < 1:
        raise BadOptionsError(f"expected positive integers, got {text!r}", "pass numbers of 1 or more")
    return values


def add_model_arguments(p, task_choices: Sequence[str]) -> None:
    """Which models to measure: tasks' demo models or named ones."""
    p.add_argument(
        "--task", action="append", choices=list(task_choices), help=f"default: {' and '.join(DEFAULT_TASKS)}"
    )
    add_model(
        p,
        "a named model's artifacts (artifacts/static/<name>, artifacts/onnx/<name>) instead of a task's demo model "
        "(repeatable; its rows are labelled with the name)",
        repeat=True,
    )


def add_cell_arguments(p) -> None:
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


def add_source_arguments(p) -> None:
    """Where the models come from: a repository that serves them, or their artifacts and texts."""
    add_repository(
        p,
        "serve this repository for the served rows (default: build the models as `build` does by default into a "
        "temporary folder)",
        default=None,
    )
    p.add_argument("--static", help="default: artifacts/static/<task> (one --task)")
    p.add_argument("--onnx", help="default: artifacts/onnx/<task>/model.onnx (one --task)")
    p.add_argument("--data", help="a split file of texts (default: the task's test split; one --task)")


def add_load_arguments(p) -> None:
    """What drives the served rows, and over what wire."""
    p.add_argument(
        "--load-generator",
        choices=LOAD_GENERATORS,
        default="auto",
        help="what drives the served rows: perf_analyzer (Triton's C++ load generator; on PATH, or unpacked by "
        "scripts/install_perf_analyzer.sh), the built-in asyncio generator (python), or both, each in turn at every "
        "cell, shown side by side (perf_analyzer's rows primary). auto (default): perf_analyzer when it is "
        "installed, else python",
    )
    # Serve the bench's servers with gRPC over TLS and drive them over TLS (the load generators, perf_analyzer).
    add_server_tls_arguments(p)
    add_tls_arguments(p)


def add_arguments(p, task_choices: Sequence[str]) -> None:
    """`bench`'s options, group by group, in the order --help lists them."""
    add_model_arguments(p, task_choices)
    add_cell_arguments(p)
    add_source_arguments(p)
    add_load_arguments(p)


def _add_moved_arguments(p) -> None:
    """The research flags of earlier releases, hidden from --help: `run` names where they went."""
    hidden = argparse.SUPPRESS
    for flag in ("--levers", "--overload", "--cache", "--input-cost", "--no-paddle", "--no-classic", "--no-ensemble"):
        p.add_argument(flag, action="store_true", help=hidden)
    for flag in ("--no-int8", "--no-peer", "--no-plot"):
        p.add_argument(flag, action="store_true", help=hidden)
    for flag in ("--sizes", "--render", "--classic-repository"):
        p.add_argument(flag, help=hidden)
    p.add_argument("--lever", action="append", help=hidden)


def moved_flags(args) -> list[str]:
    """The research flags given, as written on the command line."""
    return ["--" + dest.replace("_", "-") for dest in MOVED if getattr(args, dest, None)]


def moved_command(args) -> str | None:
    """The command of benchmarks/ that runs what these research flags asked for; None when none was given."""
    given = [dest for dest in MOVED if getattr(args, dest, None)]
    if not given:
        return None
    # the mode named, else the default run that took the other flags
    modes = [MOVED[dest] for dest in given if MOVED[dest] != "run"]
    return modes[0] if modes else "run"


def config_from_args(args, cls: type[BenchConfig] = BenchConfig, **changes) -> BenchConfig:
    """The settings the flags ask for, on `cls`'s defaults (its smoke run's with --smoke), then `changes`."""
    base = cls.smoke() if args.smoke else cls()
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
    changes.update(load_generator_settings(args.load_generator))
    changes["grpc_tls"], changes["tls"] = self_served_tls(args, "bench")
    return dataclasses.replace(base, **changes)


def load_generator_settings(choice: str) -> dict:
    """BenchConfig's load_generators and perf_analyzer for a --load-generator choice. auto prefers perf_analyzer:
    its client costs the shared cores less per request than the Python generator's (docs/BENCHMARKS.md, load
    generators side by side), and it is the tool Triton users measure with."""

    if choice == "python":
        return {"load_generators": (PYTHON,), "perf_analyzer": None}
    if choice == "auto":
        binary = find_perf_analyzer()
        return {"load_generators": (PERF_ANALYZER if binary else PYTHON,), "perf_analyzer": binary}
    binary = require_perf_analyzer()
    tools = (PERF_ANALYZER, PYTHON) if choice == "both" else (PERF_ANALYZER,)
    return {"load_generators": tools, "perf_analyzer": binary}


def inputs_from_args(args, config: BenchConfig) -> list:
    """Each model's files and texts (evaluate.inputs.ModelInputs): the named models, else the tasks' demo models."""

    if args.model and args.task:
        raise BadOptionsError("--task and --model pick the models two ways", "pass one of them")
    names = args.model or [DEMO_MODELS[task] for task in args.task or DEFAULT_TASKS]
    if (args.static or args.onnx or args.data) and len(names) != 1:
        raise BadOptionsError(
            "--static, --onnx and --data name one model's files", "pass exactly one --task or --model with them"
        )
    return [
        ModelInputs.load(name, static=args.static, onnx=args.onnx, data=args.data, max_texts=config.max_texts)
        for name in names
    ]


def run(args) -> None:
    moved = moved_command(args)
    if moved:
        raise BadOptionsError(
            f"{' '.join(moved_flags(args))}: this repository's own benchmarks left the package for benchmarks/ in the "
            "source tree (not installed with ernie-deploy)",
            f"from a checkout of ernie-deploy, run `bash scripts/bench.sh {moved}` with the same options (or "
            f"`python -m benchmarks {moved} ...` from its root); `ernie-deploy bench` without them times your "
            "served model against its in-process limit",
        )

    config = config_from_args(args)
    out = Path(args.out) if args.out else None
    run_and_write(inputs_from_args(args, config), config, out, repository=args.repository)
