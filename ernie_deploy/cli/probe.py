"""`ernie-deploy probe`: one text through every ready served model of a running server, whatever its layout (the
liveness check). It asks the server what it serves, so it reads no repository."""

from __future__ import annotations

from ernie_deploy.cli.arguments import add_model
from ernie_deploy.core.endpoints import DEFAULT_HTTP_URL
from ernie_deploy.core.errors import FailedRequestsError, ServerNotReadyError
from ernie_deploy.core.tls import add_tls_arguments, https_tls
from ernie_deploy.server.probe import (
    PROBE_TEXT,  # standard library only: cheap to import
    ProbeFailed,
    probe,
)


def register(sub) -> None:
    p = sub.add_parser(
        "probe",
        help="send one text through every ready served model of a running server, whatever its layout; non-zero "
        "exit if any fails (a liveness check that sees dead python-backend stubs)",
    )
    p.add_argument("--http-url", default=DEFAULT_HTTP_URL, help="the server's HTTP endpoint (default %(default)s)")
    add_model(p, "probe this served model (repeatable; default: every ready one)", repeat=True, old_name=False)
    p.add_argument("--text", default=PROBE_TEXT, help="the text sent (default %(default)r)")
    p.add_argument("--timeout", type=float, default=5.0, help="seconds per HTTP call (default %(default)s)")
    add_tls_arguments(p, http=True)
    p.set_defaults(func=run)


def run(args) -> None:

    tls = https_tls(args.http_url, args)
    try:
        results = probe(args.http_url, args.model, args.text, args.timeout, tls)
    except ProbeFailed as exc:
        raise ServerNotReadyError(
            f"cannot probe {args.http_url}: {exc.problem}",
            "check that the server is up and the URL points at its HTTP port",
        ) from None
    for r in results:
        print(
            f"{'ok' if r.ok else 'FAIL'} {r.model} ({r.seconds * 1000:.0f} ms){': ' + r.message if r.message else ''}"
        )
    failed = [r.model for r in results if not r.ok]
    if failed:
        raise FailedRequestsError(
            f"{', '.join(failed)} did not answer a text",
            "restart the server (a liveness probe does this for you); its log says which step died",
        )
