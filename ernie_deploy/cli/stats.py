"""`ernie-deploy stats`: where a running server's time goes, per served model and step (Triton's statistics), and
what each served model answers against its reference (the answer series on the server's /metrics).

What the server serves is asked from the server (server.discover), not read from a folder: with its admin key,
its index and configs; without, its statistics and metadata, helped by a local repository where that matches."""

from __future__ import annotations

from ernie_deploy.cli.arguments import REPOSITORY, add_model, add_repository
from ernie_deploy.client.answers import format_answers, model_dict, scrape
from ernie_deploy.core.admin_key import admin_key_from
from ernie_deploy.core.endpoints import DEFAULT_HTTP_URL, DEFAULT_METRICS_URL
from ernie_deploy.core.errors import BadOptionsError, BadRepositoryError, ErnieDeployError
from ernie_deploy.core.files import write_json
from ernie_deploy.core.tls import add_tls_arguments, https_tls
from ernie_deploy.server.discover import LocalRecord, RecordedModel, served_on_server, unread_record
from ernie_deploy.server.stats import format_table, served_times, snapshot, to_dict


def register(sub) -> None:
    p = sub.add_parser(
        "stats",
        help="per model the server serves (asked from the server: its configs with the admin key, else its "
        "metadata): its requests and failed requests (those a bounded queue refused included), each step's "
        "requests, failed requests, texts per run, queue and compute time per request, the time spent between "
        "steps, and the response cache's hits and misses (`build --cache`), from Triton's statistics API; a step "
        "several models run is marked with all of them. Since load the counts include each step's warm-up "
        "requests (a column says how many); --interval shows traffic alone. Then, per served model and version, "
        "what it answered (from --metrics-url): each profile series' buckets, live share beside the reference "
        "share, the drift per series (Jensen-Shannon, 0..1), and a running shadow's agreement and flips",
    )
    p.add_argument("--http-url", default=DEFAULT_HTTP_URL, help="the server's HTTP endpoint (default %(default)s)")
    p.add_argument(
        "--admin-key-file",
        help="file holding the server's admin key, which reads its configs: each ensemble's steps and each step's "
        "warm-up (default: $ERNIE_DEPLOY_ADMIN_KEY_FILE, else $ERNIE_DEPLOY_ADMIN_KEY; without a key, the "
        "server's metadata)",
    )
    add_repository(
        p,
        "without the admin key: the folder the server serves, whose configs give the steps of each ensemble where "
        f"they match what the server serves (default: {REPOSITORY} where it exists)",
        default=None,
    )
    add_model(p, "show this served model (repeatable; default: every one)", repeat=True, old_name=False)
    p.add_argument(
        "--interval",
        type=float,
        default=0.0,
        help="seconds between two snapshots: show what happened in between, warm-up excluded (default: everything "
        "since load, warm-up included)",
    )
    p.add_argument(
        "--metrics-url",
        default=DEFAULT_METRICS_URL,
        help="the server's Prometheus metrics, where the answer series are (default %(default)s, the metrics "
        "port on loopback)",
    )
    p.add_argument("--json", help="also write the numbers as JSON to this file")
    add_tls_arguments(p, http=True)
    p.set_defaults(func=run)


def run(args) -> None:
    import time
    from pathlib import Path

    if args.interval < 0:
        raise BadOptionsError(f"--interval {args.interval} is negative", "pass seconds above 0, or leave it out")
    if args.repository is not None and not Path(args.repository).is_dir():
        raise BadRepositoryError(
            f"no model repository at {args.repository}",
            "pass the folder the server serves as --repository, or leave it out (the admin key reads each "
            "ensemble's steps from the server)",
        )
    url = args.http_url.rstrip("/")
    if "://" not in url:
        url = f"http://{url}"
    tls = https_tls(url, args)
    served = served_on_server(
        url, admin_key_from(args.admin_key_file), local_record(args.repository or REPOSITORY), tls=tls
    )
    unknown = sorted(set(args.model or []) - set(served.steps))
    if unknown:
        raise BadOptionsError(
            f"{', '.join(unknown)}: not a model {url} serves",
            f"use one of: {', '.join(served.steps) or '(none is loaded)'}",
        )
    metrics_url = args.metrics_url if "://" in args.metrics_url else f"http://{args.metrics_url}"
    before = snapshot(url, tls=tls) if args.interval > 0 else None
    answers_before = _scrape(metrics_url) if before is not None else None
    if before is not None:
        time.sleep(args.interval)
    rows = served_times(
        served.steps,
        snapshot(url, tls=tls),
        before,
        models=args.model,
        warmups=served.warmups,
        # a model named with --model is what was asked for; the loaded models no served one runs are the rest
        others=[] if args.model else served.unattached,
    )
    answers, problem = _scrape(metrics_url)
    if answers_before is not None and answers_before[0] is None:
        answers, problem = None, answers_before[1]
    elif answers_before is not None and answers is not None:
        answers = answers.since(answers_before[0])
    shown = [r.model for r in rows if r.served]
    if answers is not None and answers.triton_models and not answers.triton_models & set(shown):
        problem = (
            f"{metrics_url} holds the series of another server (none of {', '.join(shown)} there); pass this "
            "server's metrics endpoint as --metrics-url"
        )
        answers = None
    print(format_table(rows))
    for note in served.notes(others_shown=not args.model):
        print(note)
    for name in shown:
        if name in served.records:
            record = served.records[name]
            print(f"{name}: serving version {record.version}: {record.summary()}")
    print()
    if answers is None:
        print(f"answers: not read: {problem}")
    else:
        print(format_answers(answers, shown, url=metrics_url, since_load=before is None))
    if args.json:
        numbers = to_dict(rows)
        for model in shown:
            numbers[model]["answers"] = model_dict(answers, model, url=metrics_url, problem=problem)
        write_json(numbers, args.json)


def _scrape(metrics_url: str):
    """(the answer series on `metrics_url`, None) or (None, why they could not be read): the times above stand
    without them."""

    try:
        return scrape(metrics_url), None
    except ErnieDeployError as exc:
        return None, f"{exc.problem}; {exc.fix}" if exc.fix else exc.problem


def local_record(folder: str):
    """The models a local repository folder records (None where there is none), for matching against the server
    where its own configs are behind the admin key (server.discover)."""
    from pathlib import Path

    from ernie_deploy.repository.layouts import entry_record
    from ernie_deploy.repository.served import Existing

    if not Path(folder).is_dir():
        return None
    existing = Existing.read(Path(folder))
    records, unread = {}, {}
    for name in sorted(existing.made()):
        try:
            records[name] = entry_record(name, existing.configs[name])
        # a record of another format (OldRecord), unreadable, or of values this version does not know: the numbers
        # stand without it, and the notes name it with its fix
        except (BadRepositoryError, BadOptionsError) as exc:
            unread[name] = unread_record(exc)
    return LocalRecord(
        folder,
        {
            name: RecordedModel(
                frozenset(t.name for t in config.input),
                frozenset(t.name for t in config.output),
                tuple(existing.steps(name)) if config.platform == "ensemble" else (),
            )
            for name, config in existing.configs.items()
        },
        records,
        unread,
    )
