"""`ernie-deploy stats`: where a running server's time goes, per served model and step (Triton's statistics)."""

from __future__ import annotations

from ernie_deploy.core.tls import add_tls_arguments
from ernie_deploy.server.probe import DEFAULT_URL  # standard library only: cheap to import


def register(sub) -> None:
    p = sub.add_parser(
        "stats",
        help="per served model: its requests and failed requests (those a bounded queue refused included), each "
        "step's requests, failed requests, texts per run, queue and compute time per request, the time spent "
        "between steps, and the response cache's hits and misses (`build --cache`), from Triton's statistics API",
    )
    p.add_argument("--url", default=DEFAULT_URL, help="the server's HTTP endpoint (default %(default)s)")
    p.add_argument("--repository", default="models", help="the repository the server serves (default %(default)s)")
    p.add_argument("--model", action="append", help="show this served model (repeatable; default: every one)")
    p.add_argument(
        "--interval",
        type=float,
        default=0.0,
        help="seconds between two snapshots: show what happened in between (default: everything since load)",
    )
    p.add_argument("--json", help="also write the numbers as JSON to this file")
    add_tls_arguments(p, http=True)
    p.set_defaults(func=run)


def run(args) -> None:
    import time
    from pathlib import Path

    from ernie_deploy.core.errors import ErnieDeployError
    from ernie_deploy.core.files import write_json
    from ernie_deploy.core.tls import https_tls
    from ernie_deploy.repository.served import served_steps
    from ernie_deploy.server.stats import format_table, served_times, snapshot, to_dict

    if not Path(args.repository).is_dir():
        raise ErnieDeployError(
            f"no model repository at {args.repository}", "pass --repository, the folder the server serves"
        )
    steps = served_steps(args.repository)
    unknown = sorted(set(args.model or []) - set(steps))
    if unknown:
        raise ErnieDeployError(
            f"{', '.join(unknown)} is not a served model of {args.repository}", f"use one of: {', '.join(steps)}"
        )
    steps = {name: members for name, members in steps.items() if not args.model or name in args.model}
    tls = https_tls(args.url, args)
    before = snapshot(args.url, tls=tls) if args.interval > 0 else None
    if before is not None:
        time.sleep(args.interval)
    rows = served_times(steps, snapshot(args.url, tls=tls), before)
    print(format_table(rows))
    if args.json:
        write_json(to_dict(rows), args.json)
