"""`ernie-deploy serve`: tritonserver on a model repository, bound to 127.0.0.1 unless asked otherwise."""

from __future__ import annotations

from ernie_deploy.core.endpoints import LOOPBACK, PORTS


def register(sub) -> None:
    p = sub.add_parser("serve", help="run tritonserver on a model repository (127.0.0.1 by default)")
    p.add_argument("repository", nargs="?", default="models")
    p.add_argument("--tritonserver", help="path to a tritonserver binary (default: the nvidia-pytriton wheel's)")
    p.add_argument("--host", default=LOOPBACK)
    for name, port in PORTS.items():
        p.add_argument(f"--{name}-port", type=int, default=port)
    p.add_argument(
        "--shm-default-byte-size",
        type=int,
        default=None,
        help="python backend shared-memory region per model instance (default 4 MiB)",
    )
    p.set_defaults(func=run)


def run(args) -> None:
    from ernie_deploy.server.process import serve_forever

    shm = {"shm_default_byte_size": args.shm_default_byte_size} if args.shm_default_byte_size else {}
    serve_forever(
        args.repository,
        tritonserver=args.tritonserver,
        host=args.host,
        http_port=args.http_port,
        grpc_port=args.grpc_port,
        metrics_port=args.metrics_port,
        **shm,
    )
