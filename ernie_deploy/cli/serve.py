"""`ernie-deploy serve`: tritonserver on a model repository, bound to 127.0.0.1 unless asked otherwise, with its
model-repository and model-config APIs behind an admin key.

The key: --admin-key-file (a mounted secret), else the file named by ERNIE_DEPLOY_ADMIN_KEY_FILE, else
ERNIE_DEPLOY_ADMIN_KEY. Without any, the server is still restricted, never open:
- on a loopback host a random key is generated for the run, written to a private 0600 file whose path is
  printed, and removed when the server stops. Loopback is not private: every local user, and any web page
  in a local browser, can reach it; a browser cannot send the custom header without a CORS preflight,
  which Triton does not grant, so a page cannot unload the models through a restricted server;
- on any other host it refuses to start: a server reachable from other machines gets a key its operator
  chose and can hand to the tools that load and unload models.

--grpc-tls-cert/--grpc-tls-key (and --grpc-tls-ca: mutual TLS) encrypt gRPC. Triton's HTTP and metrics endpoints
have no TLS: --http-host keeps them on another address (127.0.0.1) than --host, e.g. behind a TLS proxy.
"""

from __future__ import annotations

import ipaddress
import shutil
import sys
from pathlib import Path

from ernie_deploy.core.admin_key import (
    ADMIN_KEY_ENV,
    ADMIN_KEY_FILE_ENV,
    ADMIN_KEY_HEADER,
    GENERATE_HINT,
    AdminKey,
    admin_key_from,
    write_new_admin_key,
)
from ernie_deploy.core.endpoints import LOOPBACK, PORTS
from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.tls import add_server_tls_arguments, server_tls_from_args
from ernie_deploy.server.cache import DEFAULT_CACHE_BYTES


def register(sub) -> None:
    p = sub.add_parser("serve", help="run tritonserver on a model repository (127.0.0.1 by default)")
    p.add_argument("repository", nargs="?", default="models")
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


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name other than localhost: it may resolve anywhere


def admin_key_for(host: str, key_file: str | None = None, environ=None) -> tuple[AdminKey, Path | None]:
    """The key the server runs with, and the file generated for it (None when the key was configured)."""
    key = admin_key_from(key_file, environ)
    if key is not None:
        return key, None
    if not is_loopback(host):
        raise ErnieDeployError(
            f"listening on {host} makes the server reachable from other machines, and no admin key is set for its "
            "model-repository and model-config APIs",
            f'give it a key: export {ADMIN_KEY_ENV}="$({GENERATE_HINT})", or --admin-key-file PATH '
            "(e.g. a mounted secret); callers of those APIs send it in the header " + ADMIN_KEY_HEADER,
        )
    key, path = write_new_admin_key()
    return key, path


def run(args) -> None:
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


def _url_option(server_kw: dict) -> str:
    """` --url ...` for stats when the HTTP port is not the one it asks by default."""
    port = server_kw.get("http_port", PORTS["http"])
    return "" if port == PORTS["http"] else f" --url http://127.0.0.1:{port}"


def serve(
    repository: str,
    *,
    host: str,
    http_host: str,
    admin_key_file: str | None = None,
    grpc_tls=None,
    **server_kw,
) -> None:
    """Serve `repository` until SIGINT/SIGTERM with the admin key this host needs; what `serve` and the
    environment's `tritonserver` command (server/launcher.py) run. `server_kw` goes to TritonServer."""
    from ernie_deploy.server.process import serve_forever

    if grpc_tls is not None and not is_loopback(http_host):
        print(
            f"note: gRPC is encrypted; HTTP (port {server_kw.get('http_port', PORTS['http'])}) and metrics (port "
            f"{server_kw.get('metrics_port', PORTS['metrics'])}) on {http_host} are not (Triton has no TLS for them): "
            "--http-host 127.0.0.1 keeps them local, behind a TLS proxy if other machines need them",
            file=sys.stderr,
            flush=True,
        )
    # the key is needed where either address is reachable from other machines
    exposed = host if not is_loopback(host) else http_host
    key, generated = admin_key_for(exposed, admin_key_file)
    if generated is not None:
        print(
            f"admin key: none set ({ADMIN_KEY_ENV}, {ADMIN_KEY_FILE_ENV}, --admin-key-file), so one was generated "
            f"for this run in {generated} (mode 0600, removed on stop).\n"
            f"  Load/unload and model configs need it in the header {ADMIN_KEY_HEADER}; inference does not.\n"
            f"  `ernie-deploy stats{_url_option(server_kw)} --admin-key-file {generated}` reads each ensemble's steps "
            "and warm-up with it.",
            file=sys.stderr,
            flush=True,
        )
    else:
        print(f"admin key: from {key.source}", file=sys.stderr, flush=True)
    try:
        serve_forever(repository, host=host, http_host=http_host, admin_key=key, grpc_tls=grpc_tls, **server_kw)
    finally:
        if generated is not None:
            shutil.rmtree(generated.parent, ignore_errors=True)
