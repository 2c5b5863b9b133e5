"""`ernie-deploy soak`: serve a repository and drive many requests, bad ones mixed in, every answer checked."""

from __future__ import annotations

from ernie_deploy.cli.arguments import add_model, add_repository, add_switch_taking_model
from ernie_deploy.core.errors import BadOptionsError, BadRepositoryError, FailedRequestsError
from ernie_deploy.core.files import write_json
from ernie_deploy.core.tls import add_server_tls_arguments, add_tls_arguments, self_served_tls
from ernie_deploy.evaluate.inputs import ModelInputs
from ernie_deploy.reliability.soak import SoakOptions, run_soak


def register(sub) -> None:
    p = sub.add_parser(
        "soak",
        help="serve a repository and drive many requests, bad ones mixed in, checking "
        "every answer against offline onnxruntime",
    )
    defaults = SoakOptions()
    add_repository(p, "the repository to serve and soak", positional=True)
    p.add_argument("--requests", type=int, default=defaults.requests)
    p.add_argument("--concurrency", type=int, default=defaults.concurrency)
    p.add_argument(
        "--bad-fraction", type=float, default=defaults.bad_fraction, help="share of requests holding bad texts"
    )
    p.add_argument("--texts", type=int, default=defaults.texts, help="test texts per task to draw requests from")
    p.add_argument(
        "--chaos",
        type=float,
        default=defaults.chaos_s,
        metavar="SECONDS",
        help="SIGKILL a random python-backend stub every SECONDS (0: never)",
    )
    p.add_argument(
        "--chaos-kills", type=int, default=defaults.chaos_kills, help="stop killing after this many (0: no limit)"
    )
    p.add_argument("--seed", type=int, default=defaults.seed)
    add_switch_taking_model(
        p,
        "--rollout",
        "instead: traffic on the --model through a rollout to --to and a rollback, every answer checked against the "
        "offline prediction of the versions",
    )
    add_model(p, "with --rollout: the served model rolled out", old_name=False)
    p.add_argument("--to", type=int, help="with --rollout: the version to roll out to (added by build --version)")
    p.add_argument("--report", default="artifacts/soak.json", help="write the report as JSON (default %(default)s)")
    add_server_tls_arguments(p)  # serve gRPC over TLS, and soak it over TLS
    add_tls_arguments(p)
    p.set_defaults(func=run)


def run(args) -> None:
    import json
    import sys

    grpc_tls, tls = self_served_tls(args, "soak")
    if args.model and not args.rollout:
        raise BadOptionsError("--model names the model --rollout rolls out", "add --rollout, or drop --model")
    if args.rollout:
        _rollout(args, grpc_tls, tls)
        return
    options = SoakOptions(
        requests=args.requests,
        concurrency=args.concurrency,
        bad_fraction=args.bad_fraction,
        texts=args.texts,
        chaos_s=args.chaos,
        chaos_kills=args.chaos_kills,
        seed=args.seed,
        grpc_tls=grpc_tls,
        tls=tls,
    )
    result, ok = run_soak(args.repository, options)
    if args.report:
        write_json(result, args.report)
    print(json.dumps(result, ensure_ascii=False, indent=2))
    if not ok:
        print("soak FAILED: see the counts and examples above", file=sys.stderr)
        raise FailedRequestsError(
            "the soak found lost, mismatched or unexpectedly failed requests",
            "read the examples in the report; the server log path is printed above",
        )


def _rollout(args, grpc_tls, tls) -> None:
    import json

    from ernie_deploy.reliability.rollout_soak import run_rollout_soak
    from ernie_deploy.repository.served import served_models

    if args.to is None:
        raise BadOptionsError("--rollout needs the version to roll out to", "add --to N")
    if not args.model:
        raise BadOptionsError("--rollout needs the model to roll out", "add --model NAME")
    models = served_models(args.repository)
    if args.model not in models:
        raise BadRepositoryError(f"{args.repository} serves no model {args.model!r}", f"use one of {sorted(models)}")
    texts = ModelInputs.texts_of(models[args.model].task_spec, args.texts)
    result = run_rollout_soak(
        args.repository, args.model, args.to, texts, concurrency=args.concurrency, grpc_tls=grpc_tls, tls=tls
    )
    if args.report:
        write_json(result, args.report)
    print(json.dumps(result, ensure_ascii=False, indent=2))
    if not result["clean"]:
        raise FailedRequestsError(
            "requests failed, got lost or were answered by the wrong version",
            "read the counts and the errors of the report printed above: they say which requests and versions",
        )
