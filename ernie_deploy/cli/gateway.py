"""`ernie-deploy gateway`: an HTTP server that answers PaddleNLP SimpleServing's and Hugging Face's JSON for every
model a tritonserver serves, calling it over gRPC (ernie_deploy.gateway; docs/GATEWAY.md). Bound to 127.0.0.1
unless --host says otherwise; HTTPS with --http-tls-cert/--http-tls-key (and --http-tls-ca: only clients with a
certificate that CA signed); --tls-ca/--tls-cert/--tls-key reach a tritonserver that serves gRPC over TLS.
"""

from __future__ import annotations

from ernie_deploy.cli.arguments import add_repository
from ernie_deploy.core.endpoints import DEFAULT_GRPC_URL, LOOPBACK
from ernie_deploy.core.errors import BadOptionsError
from ernie_deploy.core.tls import add_tls_arguments, tls_from_args
from ernie_deploy.gateway.defaults import (
    DEFAULT_COALESCE_MS,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_CLIENT_BATCH_SIZE,
    DEFAULT_MAX_CONCURRENT,
    DEFAULT_PORT,
)


def register(sub) -> None:

    p = sub.add_parser(
        "gateway", help="HTTP gateway: SimpleServing's and Hugging Face's JSON for the served models (gRPC to Triton)"
    )
    add_repository(p, "the repository the server serves, read for the models' records")
    p.add_argument(
        "--grpc-url", default=DEFAULT_GRPC_URL, help="the tritonserver's gRPC address (default: %(default)s)"
    )
    p.add_argument("--host", default=LOOPBACK, help="address to listen on (default: %(default)s)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="port to listen on (default: %(default)s)")
    p.add_argument(
        "--max-body-bytes",
        type=int,
        default=DEFAULT_MAX_BODY_BYTES,
        metavar="BYTES",
        help="refuse a larger request body with 413 before reading it (default %(default)s: 4 MiB, the largest "
        "request a model with the default limits takes, written as JSON with \\u escapes)",
    )
    p.add_argument(
        "--max-concurrent-requests",
        type=int,
        default=DEFAULT_MAX_CONCURRENT,
        metavar="N",
        help="inference requests answered at once; more get 503 with Retry-After (default %(default)s)",
    )
    p.add_argument(
        "--max-client-batch-size",
        type=int,
        default=DEFAULT_MAX_CLIENT_BATCH_SIZE,
        metavar="N",
        help="texts one inference request may hold (TEI's max_client_batch_size; a rerank query's texts, a "
        "similarity's sentences and its source); more are refused by name with 413 (400 on /v1/embeddings) "
        "(default %(default)s)",
    )
    p.add_argument(
        "--coalesce-ms",
        type=float,
        default=DEFAULT_COALESCE_MS,
        metavar="MS",
        help="while a call to a model is in flight, merge the requests to it that come within this window into one "
        "Triton call, at most its max_batch_size texts (a lone request never waits it; 0: never merge; "
        "default %(default)s)",
    )
    p.add_argument(
        "--timeout", type=float, default=60.0, metavar="SECONDS", help="per Triton request (default %(default)s)"
    )
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    https = p.add_argument_group("HTTPS", "serve HTTPS instead of HTTP (PEM files; a key without a passphrase)")
    https.add_argument("--http-tls-cert", metavar="FILE", help="the gateway's certificate (and chain)")
    https.add_argument("--http-tls-key", metavar="FILE", help="the gateway certificate's private key")
    https.add_argument(
        "--http-tls-ca", metavar="FILE", help="mutual TLS: serve only clients presenting a certificate this CA signed"
    )
    add_tls_arguments(p)
    p.set_defaults(func=run)


def _https(args):
    from pathlib import Path

    from ernie_deploy.gateway.listen import Https

    cert, key, ca = args.http_tls_cert, args.http_tls_key, args.http_tls_ca
    if not (cert or key or ca):
        return None
    if not (cert and key):
        raise BadOptionsError(
            "HTTPS needs the gateway's certificate and its private key",
            "pass both --http-tls-cert and --http-tls-key (and --http-tls-ca for mutual TLS)",
        )
    return Https(Path(cert), Path(key), Path(ca) if ca else None)


def run(args) -> None:
    from pathlib import Path

    from ernie_deploy.gateway.app import GatewaySettings
    from ernie_deploy.gateway.listen import serve

    settings = GatewaySettings(
        repository=Path(args.repository),
        grpc_url=args.grpc_url,
        tls=tls_from_args(args),
        max_body_bytes=args.max_body_bytes,
        max_concurrent_requests=args.max_concurrent_requests,
        max_client_batch_size=args.max_client_batch_size,
        timeout_s=args.timeout,
        coalesce_ms=args.coalesce_ms,
    )
    serve(settings, host=args.host, port=args.port, https=_https(args), log_level=args.log_level)
