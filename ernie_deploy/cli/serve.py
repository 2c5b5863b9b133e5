"""`ernie-deploy serve`: tritonserver on a model repository, bound to 127.0.0.1 unless asked otherwise, with its
model-repository and model-config APIs behind an admin key (server/serve.py: where the key comes from, and why a
server off loopback refuses to start without one).

--grpc-tls-cert/--grpc-tls-key (and --grpc-tls-ca: mutual TLS) encrypt gRPC. Triton's HTTP and metrics endpoints
have no TLS: --http-host keeps them on another address (127.0.0.1) than --host, e.g. behind a TLS proxy.

--gateway also runs the HTTP gateway (`ernie-deploy gateway`: SimpleServing's and Hugging Face's JSON) once Triton is
ready, as a second process calling this server's gRPC, on --gateway-port of the HTTP address (--http-host, else
--host: it is plain HTTP like Triton's own). Over gRPC TLS it trusts --tls-ca and, under mutual TLS, presents
--tls-cert/--tls-key; the server's certificate must name the address it dials (127.0.0.1 when --host is loopback or
0.0.0.0).
"""

from __future__ import annotations

from pathlib import Path

from ernie_deploy.cli.arguments import add_repository
from ernie_deploy.core.admin_key import ADMIN_KEY_ENV, ADMIN_KEY_FILE_ENV, ADMIN_KEY_HEADER
from ernie_deploy.core.endpoints import LOOPBACK, PORTS
from ernie_deploy.core.errors import BadOptionsError
from ernie_deploy.core.tls import PEM_HINT, ServerTls, add_server_tls_arguments, server_tls_from_args, tls_from_args
from ernie_deploy.gateway.defaults import DEFAULT_PORT
from ernie_deploy.gateway.process import GatewayProcess
from ernie_deploy.server.cache import DEFAULT_CACHE_BYTES
from ernie_deploy.server.preflight import check_port_free
from ernie_deploy.server.serve import serve


def register(sub) -> None:
    p = sub.add_parser("serve", help="run tritonserver on a model repository (127.0.0.1 by default)")
    add_repository(p, "the repository to serve", positional=True)
    p.add_argument("--tritonserver", help="path to a tritonserver binary (default: the nvidia-pytriton wheel's)")
    p.add_argument("--host", default=LOOPBACK)
    p.add_argument(
        "--http-host",
        help="address of the HTTP and metrics endpoints, which have no TLS (default: --host), e.g. 127.0.0.1 "
        "while gRPC, over TLS, listens on --host 0.0.0.0",
    )
    for name, port in PORTS.items():
        p.add_argument(f"--{name}-port", type=int, default=port)
    p.add_argument(
        "--shm-default-byte-size",
        type=int,
        default=None,
        help="python backend shared-memory region per model instance (default 4 MiB)",
    )
    p.add_argument(
        "--cache-size",
        type=int,
        default=DEFAULT_CACHE_BYTES,
        metavar="BYTES",
        help="Triton's response cache, which models built with --cache answer from (default %(default)s: 64 MiB, "
        "taken only as answers are cached; 0: no cache, refused if a model asks for it)",
    )
    p.add_argument(
        "--admin-key-file",
        help=f"file holding the key for the model-repository and model-config APIs (header {ADMIN_KEY_HEADER}); "
        f"default: ${ADMIN_KEY_FILE_ENV}, then ${ADMIN_KEY_ENV}, else a key generated for the run (loopback only)",
    )
    add_server_tls_arguments(p)
    _add_gateway_arguments(p)
    p.set_defaults(func=run)


def _add_gateway_arguments(p) -> None:

    group = p.add_argument_group(
        "gateway", "also run the HTTP gateway (SimpleServing's and Hugging Face's JSON; docs/GATEWAY.md) beside Triton"
    )
    group.add_argument(
        "--gateway",
        action="store_true",
        help="start `ernie-deploy gateway` once Triton is ready, on this server's gRPC and repository; it is "
        "stopped before Triton, and if it exits on its own both stop",
    )
    group.add_argument(
        "--gateway-port",
        type=int,
        default=DEFAULT_PORT,
        help="the gateway's port, on --http-host (default %(default)s; 0: a free one)",
    )
    group.add_argument(
        "--tls-ca",
        metavar="FILE",
        help="with --gateway and --grpc-tls-cert: the CA that signed the server's certificate, which the gateway "
        f"trusts ({PEM_HINT})",
    )
    group.add_argument(
        "--tls-cert", metavar="FILE", help="with --gateway and --grpc-tls-ca: the gateway's client certificate"
    )
    group.add_argument("--tls-key", metavar="FILE", help="the gateway's client certificate's private key")


def _gateway(args, grpc_tls: ServerTls | None):
    """The factory serve_forever starts the gateway with, or None without --gateway; its options checked first."""

    client_tls = tls_from_args(args)  # the files checked, a certificate matched to its key
    if not args.gateway:
        options = (("--tls-ca", args.tls_ca), ("--tls-cert", args.tls_cert), ("--tls-key", args.tls_key))
        given = [option for option, value in options if value]
        if args.gateway_port != DEFAULT_PORT:
            given.append("--gateway-port")
        if given:
            raise BadOptionsError(
                f"{', '.join(given)} configure the gateway, and no --gateway was given",
                "add --gateway to run it beside the server, or drop those options",
            )
        return None
    if grpc_tls is None and client_tls is not None:
        raise BadOptionsError(
            "--tls-ca, --tls-cert and --tls-key are how the gateway reaches a server that serves gRPC over TLS, and "
            "this one serves plain gRPC",
            "add --grpc-tls-cert and --grpc-tls-key (and --grpc-tls-ca for mutual TLS), or drop the --tls options",
        )
    if grpc_tls is not None and (client_tls is None or client_tls.ca is None):
        raise BadOptionsError(
            "--gateway with gRPC over TLS: the gateway calls this server's gRPC and has no CA to trust its certificate",
            "add --tls-ca, the CA that signed --grpc-tls-cert (the certificate must name the address the gateway "
            "dials: 127.0.0.1 when --host is loopback or 0.0.0.0)",
        )
    if grpc_tls is not None and grpc_tls.mutual and not client_tls.mutual:
        raise BadOptionsError(
            "--grpc-tls-ca makes the server require client certificates, and the gateway has none",
            "add --tls-cert and --tls-key: a client certificate signed by --grpc-tls-ca, which the gateway presents",
        )
    host = args.http_host or args.host
    if args.gateway_port:
        check_port_free(host, args.gateway_port, "gateway")  # before Triton starts, not after it loaded every model
    tls_args = []
    if client_tls is not None:
        files = {"--tls-ca": client_tls.ca, "--tls-cert": client_tls.cert, "--tls-key": client_tls.key}
        tls_args = [arg for option, path in files.items() if path is not None for arg in (option, str(path.absolute()))]

    def make(server):

        log = server.log_path.with_name("gateway.log") if server.log_path else None
        return GatewayProcess(
            args.repository, server.grpc_url, host=host, port=args.gateway_port, args=tls_args, log_file=log
        )

    return make


def models_to_load(repository: str, extra_args=()) -> dict:
    """`load_models` for TritonServer: every entry but those never made (repository.unmade), each named on stderr
    with the command that makes it; {} where nothing is left out, or where the caller chose its own model control
    (--model-control-mode, --load-model), which is then told what will fail to load."""
    import sys

    from ernie_deploy.repository.served import load_plan

    if not Path(repository).is_dir():
        return {}  # the server's own checks name a missing repository
    plan = load_plan(repository)
    own = any(a.startswith(("--model-control-mode", "--load-model")) for a in extra_args)
    said = "will fail to load if loaded" if own else "skipped"
    for model in plan.skipped:
        print(f"{said}: {model.note(repository)}", file=sys.stderr, flush=True)
    for entry in plan.orphans:
        print(
            f"{said}: {entry}: a config alone that no model uses; remove {repository}/{entry}",
            file=sys.stderr,
            flush=True,
        )
    return {} if plan.load is None or own else {"load_models": plan.load}


def run(args) -> None:

    shm = {"shm_default_byte_size": args.shm_default_byte_size} if args.shm_default_byte_size else {}
    grpc_tls = server_tls_from_args(args)
    gateway = _gateway(args, grpc_tls)
    serve(
        args.repository,
        host=args.host,
        http_host=args.http_host or args.host,
        admin_key_file=args.admin_key_file,
        grpc_tls=grpc_tls,
        gateway=gateway,
        tritonserver=args.tritonserver,
        http_port=args.http_port,
        grpc_port=args.grpc_port,
        metrics_port=args.metrics_port,
        cache_bytes=args.cache_size,
        **models_to_load(args.repository),
        **shm,
    )
