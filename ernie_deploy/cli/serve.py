"""`ernie-deploy serve`: tritonserver on a model repository, bound to 127.0.0.1 unless asked otherwise, with its
model-repository and model-config APIs behind an admin key (server/serve.py: where the key comes from, and why a
server off loopback refuses to start without one).

--grpc-tls-cert/--grpc-tls-key (and --grpc-tls-ca: mutual TLS) encrypt gRPC. Triton's HTTP and metrics endpoints
have no TLS: --http-host keeps them on another address (127.0.0.1) than --host, e.g. behind a TLS proxy.
"""

from __future__ import annotations

from ernie_deploy.cli.arguments import add_repository
from ernie_deploy.core.admin_key import ADMIN_KEY_ENV, ADMIN_KEY_FILE_ENV, ADMIN_KEY_HEADER
from ernie_deploy.core.endpoints import LOOPBACK, PORTS
from ernie_deploy.core.tls import add_server_tls_arguments, server_tls_from_args
from ernie_deploy.server.cache import DEFAULT_CACHE_BYTES


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
    p.set_defaults(func=run)


def run(args) -> None:
    from ernie_deploy.server.serve import serve

    shm = {"shm_default_byte_size": args.shm_default_byte_size} if args.shm_default_byte_size else {}
    serve(
        args.repository,
        host=args.host,
        http_host=args.http_host or args.host,
        admin_key_file=args.admin_key_file,
        grpc_tls=server_tls_from_args(args),
        tritonserver=args.tritonserver,
        http_port=args.http_port,
        grpc_port=args.grpc_port,
        metrics_port=args.metrics_port,
        cache_bytes=args.cache_size,
        **shm,
    )
