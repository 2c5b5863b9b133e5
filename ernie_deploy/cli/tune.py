"""`ernie-deploy tune --model NAME`: search a served model's layout and settings on this machine
(ernie_deploy.bench.tune), print and save the table, and write the winner as a new version for `ernie-deploy
rollout`."""

from __future__ import annotations

from ernie_deploy.bench.config import BenchConfig
from ernie_deploy.bench.tune import (
    DIMENSIONS,
    MIN_GAIN,
    OBJECTIVES,
    Objective,
    render,
    served_options,
    tune_in_tempdir,
    write_winner,
)
from ernie_deploy.cli.arguments import add_model, add_repository, required_model
from ernie_deploy.cli.bench import load_generator_settings
from ernie_deploy.core.errors import BadOptionsError
from ernie_deploy.core.files import write_json
from ernie_deploy.core.paths import artifacts_dir
from ernie_deploy.evaluate.inputs import ModelInputs


def register(sub) -> None:

    p = sub.add_parser(
        "tune",
        help="search a served model's layout, instances, threads, spinning, queue delay and max batch on this "
        "machine with perf_analyzer; write the winner as a new version",
    )
    add_model(p, "the served model to tune (required)", old_name=False, positional=True)
    add_repository(p, "the repository serving it")
    p.add_argument("--objective", choices=OBJECTIVES, default="throughput", help="default %(default)s")
    p.add_argument("--p99-ms", type=float, help="throughput objective: the p99 a winner must stay under")
    p.add_argument("--concurrency", type=int, help="requests in flight (default: 8 for throughput, 1 for latency)")
    p.add_argument("--budget", type=float, default=15.0, help="minutes the search may take (default %(default)s)")
    p.add_argument(
        "--dimensions",
        help=f"comma-separated, in the order searched (default all: {','.join(DIMENSIONS)})",
    )
    p.add_argument("--duration", type=float, default=5.0, help="seconds measured per trial (default %(default)s)")
    p.add_argument("--warmup", type=float, default=1.0, help="seconds of warm-up per trial (default %(default)s)")
    p.add_argument("--texts", type=int, help="use only the first N test texts")
    p.add_argument("--data", help="a split file of texts to send (default: the model's test split)")
    p.add_argument(
        "--load-generator",
        choices=("auto", "python", "perf_analyzer"),
        default="auto",
        help="auto: perf_analyzer where installed (scripts/install_perf_analyzer.sh), else the asyncio generator",
    )
    p.add_argument("--out", help="where to save the table as JSON (default artifacts/reports/tune/NAME.json)")
    p.add_argument("--version", type=int, help="the version number to write the winner as (default: the next)")
    p.add_argument("--no-version", action="store_true", help="measure and report only; write no version")
    p.add_argument(
        "--min-gain",
        type=float,
        default=MIN_GAIN,
        help="write the winner only when it measured at least this much better than the served settings "
        "(a fraction; default %(default)s)",
    )
    p.set_defaults(func=run)


def run(args) -> None:
    from dataclasses import replace
    from pathlib import Path

    if args.budget <= 0 or args.duration <= 0:
        raise BadOptionsError("--budget and --duration must be positive", "pass minutes and seconds above 0")
    if args.concurrency is not None and args.concurrency < 1:
        raise BadOptionsError(f"--concurrency {args.concurrency}: no request would be sent", "pass 1 or more")
    name = required_model(args)
    objective = Objective(args.objective, args.p99_ms)
    record, base = served_options(args.repository, name)
    config = replace(
        BenchConfig(), duration_s=args.duration, warmup_s=args.warmup, **load_generator_settings(args.load_generator)
    )
    # Every trial builds from the record as served, with the settings the trial replaces.
    inputs = replace(ModelInputs.load(name, data=args.data, max_texts=args.texts), model=record)
    dimensions = [d.strip() for d in args.dimensions.split(",") if d.strip()] if args.dimensions else None
    result = tune_in_tempdir(
        inputs, config, objective, base, concurrency=args.concurrency, budget_s=60 * args.budget, dimensions=dimensions
    )
    table = render(result, objective)
    print(table)
    out = Path(args.out or artifacts_dir() / "reports" / "tune" / f"{name}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json({**result.to_dict(), "load_generator": config.load_generators[0], "table": table}, out)
    print(f"saved {out}")
    if args.no_version:
        return
    written = write_winner(
        result, inputs, args.repository, base, args.version, objective=objective, min_gain=args.min_gain
    )
    if written.version is not None:
        print(f"wrote the winner as version {written.version} of {name}")
    print(written.advice)
