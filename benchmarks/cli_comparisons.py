"""The subcommands of `python -m benchmarks` that compare two servings of the classifier in alternating rounds:
gateway (through the HTTP gateway against direct gRPC), monitoring (watched against `build --no-monitor`) and
scores-cost (every label's probability on request against an earlier revision's build)."""

from __future__ import annotations

from benchmarks.cli_shared import add_out, out_folder, research_config
from benchmarks.gateway import run_gateway
from benchmarks.monitoring import LAYOUTS, run_monitoring
from benchmarks.scores_cost import BEFORE, run_scores_cost
from ernie_deploy.cli.bench import add_arguments, inputs_from_args
from ernie_deploy.core.tasks import TASKS


def add_comparisons(sub) -> None:

    p = sub.add_parser(
        "gateway",
        help="the classifier through the HTTP gateway (SimpleServing's and Hugging Face's routes) against direct "
        "gRPC on one server, and the SimpleServing route against SimpleServing itself; writes gateway.json",
    )
    add_arguments(p, sorted(TASKS))
    p.add_argument("--rounds", type=int, default=3, help="rounds of every cell, alternating (default %(default)s)")
    p.add_argument("--no-peer", action="store_true", help="leave out SimpleServing itself")
    p.add_argument(
        "--pin",
        action="store_true",
        help="the server and the load generator on one core, the gateway on another (gateway-pinned.json): what "
        "the gateway costs when its CPU is not taken from the server's",
    )
    p.add_argument(
        "--coalesce-ms",
        type=float,
        default=None,
        metavar="MS",
        help="the merging gateway's window (default: the gateway's own); a second gateway beside it merges nothing",
    )
    add_out(p, "gateway.json")
    p.set_defaults(func=_gateway)
    p = sub.add_parser(
        "monitoring",
        help="the classifier watched (what it answers counted on /metrics: build's default) against the same model "
        "built with --no-monitor, on one server: c1 latency, c8 throughput, the scrape's size, the watch timed in "
        "process; writes monitoring.json",
    )
    add_arguments(p, sorted(TASKS))
    p.add_argument("--rounds", type=int, default=3, help="rounds of every cell, alternating (default %(default)s)")
    p.add_argument(
        "--layout",
        action="append",
        choices=("default", "ensemble"),
        help="measure this layout (repeatable; default: both; `default` is what build picks, fused on the python "
        "runtime)",
    )
    p.add_argument("--no-in-process", action="store_true", help="skip timing the watch in this process")
    add_out(p, "monitoring.json")
    p.set_defaults(func=_monitoring)
    p = sub.add_parser(
        "scores-cost",
        help="the classifier as built now (every label's probability and the logits on request) against the same "
        "model built by an earlier revision, loaded with and without asking for them; writes scores-cost.json",
    )
    add_arguments(p, sorted(TASKS))
    p.add_argument("--rounds", type=int, default=3, help="rounds of every cell, alternating (default %(default)s)")
    p.add_argument(
        "--before",
        help="the git revision to build the earlier model with (default: the last one before classifiers answered "
        "every label's probability)",
    )
    add_out(p, "scores-cost.json")
    p.set_defaults(func=_scores_cost)


def _classifier(args):
    """The comparison's config, and the classifier's inputs (the demo classifier unless a model is named)."""

    if not args.task and not args.model:  # it measures the classifier: the other demo models are not read
        args.task = ["seq_cls"]
    config = research_config(args)
    timing = {
        "rounds": 1 if args.smoke else args.rounds,  # --smoke: one round of 1 s cells
        "duration_s": 1.0 if args.smoke else config.duration_s,
        "warmup_s": config.warmup_s,
    }
    return inputs_from_args(args, config), timing


def _gateway(args) -> None:

    inputs, timing = _classifier(args)
    window = {} if args.coalesce_ms is None else {"coalesce_ms": args.coalesce_ms}
    run_gateway(inputs, out_folder(args), **timing, peer=not args.no_peer, pin=args.pin, **window)


def _monitoring(args) -> None:

    inputs, timing = _classifier(args)
    layouts = tuple(dict.fromkeys(args.layout or LAYOUTS))
    run_monitoring(inputs, out_folder(args), layouts=layouts, **timing, in_process=not args.no_in_process)


def _scores_cost(args) -> None:

    inputs, timing = _classifier(args)
    run_scores_cost(inputs, out_folder(args), before=args.before or BEFORE, **timing)
