"""`ernie-deploy rollout` and `ernie-deploy rollback`: move a named model between its versions on a running server
(ernie_deploy.operate.rollout), probing the new version through a canary ensemble before switching."""

from __future__ import annotations

from ernie_deploy.cli.arguments import add_model, add_repository, required_model
from ernie_deploy.client.admin import RepositoryAdmin
from ernie_deploy.core.endpoints import DEFAULT_GRPC_URL, DEFAULT_METRICS_URL
from ernie_deploy.core.errors import BadOptionsError, BadRepositoryError
from ernie_deploy.core.shadow import DEFAULT_FRACTION
from ernie_deploy.core.tls import add_tls_arguments, tls_from_args


def _common(p) -> None:
    add_model(p, "the served model (required)", old_name=False, positional=True)
    add_repository(p, "the repository the server runs (its configs are edited)")
    p.add_argument("--grpc-url", default=DEFAULT_GRPC_URL, help="the server's gRPC address (default %(default)s)")
    p.add_argument(
        "--admin-key-file",
        help="file holding the server's admin key (default: $ERNIE_DEPLOY_ADMIN_KEY_FILE, else "
        "$ERNIE_DEPLOY_ADMIN_KEY)",
    )
    p.add_argument("--probe-text", action="append", help="text the canary must answer (repeatable)")
    add_tls_arguments(p)


def register(sub) -> None:
    p = sub.add_parser("rollout", help="switch a model to another of its versions, canary-probed, with no downtime")
    _common(p)
    p.add_argument("--to", type=int, required=True, help="the version to serve (added by `build --version N`)")
    _shadow_arguments(p)
    p.set_defaults(func=run)
    p = sub.add_parser("rollback", help="switch a model back to its previous version (or --to N)")
    _common(p)
    p.add_argument("--to", type=int, help="default: the newest version on disk older than the serving one")
    p.set_defaults(func=run_rollback)


def _shadow_arguments(p) -> None:
    from ernie_deploy.operate.shadow import DEFAULT_DURATION_S, REQUESTS_BOUND_S

    g = p.add_argument_group("shadow evaluation (compare the new version on live traffic before switching)")
    g.add_argument(
        "--shadow",
        action="store_true",
        help="mirror a share of the serving version's requests to the new version, compare their answers, report, "
        "then switch (clients only ever get the serving version's answers)",
    )
    g.add_argument(
        "--fraction", type=float, default=DEFAULT_FRACTION, help="share of requests mirrored (default %(default)s)"
    )
    g.add_argument(
        "--duration",
        type=float,
        help=f"seconds to shadow at most (default {DEFAULT_DURATION_S:g}; with --requests alone, {REQUESTS_BOUND_S:g})",
    )
    g.add_argument("--requests", type=int, help="stop once this many texts were compared")
    g.add_argument(
        "--min-agreement",
        type=float,
        help="do not switch, and exit non-zero, where the share of agreeing answers is below this (0..1)",
    )
    g.add_argument(
        "--metrics-url", default=DEFAULT_METRICS_URL, help="the server's Prometheus metrics (default %(default)s)"
    )


def _check_shadow_arguments(args) -> None:

    given = [
        flag
        for flag, value, unset in (
            ("--duration", args.duration, None),
            ("--requests", args.requests, None),
            ("--min-agreement", args.min_agreement, None),
            ("--fraction", args.fraction, DEFAULT_FRACTION),
        )
        if value != unset
    ]
    if given and not args.shadow:
        raise BadOptionsError(f"{', '.join(given)} only apply to a shadow evaluation", "add --shadow, or drop them")


def run(args, to_version: int | None = None) -> None:
    from ernie_deploy.operate.rollout import PROBE_TEXTS, canary_probe, rollout
    from ernie_deploy.repository.served import served_models

    if getattr(args, "shadow", None) is not None:  # rollout, not rollback
        _check_shadow_arguments(args)
    name = required_model(args)
    models = served_models(args.repository)
    if name not in models:
        raise BadRepositoryError(
            f"{args.repository} serves no model {name!r}", f"use one of: {', '.join(sorted(models)) or 'none'}"
        )
    tls = tls_from_args(args)
    if getattr(args, "shadow", False):
        from ernie_deploy.operate.shadow import shadow_rollout

        with RepositoryAdmin.from_env(args.grpc_url, args.admin_key_file, tls=tls) as admin:
            shadow = shadow_rollout(
                args.repository,
                name,
                args.to,
                admin,
                canary_probe(args.grpc_url, tls),
                fraction=args.fraction,
                duration_s=args.duration,
                requests=args.requests,
                min_agreement=args.min_agreement,
                metrics_url=args.metrics_url,
                probe_texts=args.probe_text or PROBE_TEXTS,
                log=print,
            )
        print(f"{shadow.name}: now serving version {shadow.candidate} (was {shadow.serving_version})")
        return
    with RepositoryAdmin.from_env(args.grpc_url, args.admin_key_file, tls=tls) as admin:
        report = rollout(
            args.repository,
            name,
            to_version or args.to,
            admin,
            canary_probe(args.grpc_url, tls),
            probe_texts=args.probe_text or PROBE_TEXTS,
            log=print,
        )
    print(f"{report.name}: now serving version {report.to_version} (was {report.from_version})")


def run_rollback(args) -> None:
    from ernie_deploy.operate.rollout import previous_version

    run(args, args.to or previous_version(args.repository, required_model(args)))
