"""`tritonserver` in the project's environment: an installed tritonserver where there is one, else the pip wheel's
server with `ernie-deploy serve`'s setup, on Triton's own command line (server/launcher.py says what and why)."""

from __future__ import annotations

import os
import sys

from ernie_deploy.cli.serve import models_to_load
from ernie_deploy.core.endpoints import LOOPBACK
from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.server.binary import find_tritonserver, server_env
from ernie_deploy.server.cache import DEFAULT_CACHE_BYTES
from ernie_deploy.server.launcher import REFUSED, installed_tritonserver, parse_triton_args
from ernie_deploy.server.serve import serve

HELP = """\
tritonserver (ernie-deploy): no tritonserver is installed here, so this runs the one in the nvidia-pytriton
wheel, set up as `ernie-deploy serve` sets it up: the python backend with this Python's stub, its shared memory
checked against the repository, addresses on 127.0.0.1 unless --http-address/--grpc-address say otherwise (HTTP
and metrics share one address), the model-repository and model-config APIs behind an admin key
(ERNIE_DEPLOY_ADMIN_KEY or ERNIE_DEPLOY_ADMIN_KEY_FILE; on loopback one is generated for the run), the response
cache (--cache-config=local,size=BYTES), python stubs that die reloaded. One --model-repository. Refused, with
what to use instead: {refused}.
Where a tritonserver is installed (on PATH, or /opt/tritonserver/bin in NVIDIA's container), that one runs instead.

Triton's options:
"""


def main(argv: list[str] | None = None) -> int:

    argv = sys.argv[1:] if argv is None else list(argv)
    real = installed_tritonserver()
    if real is not None:
        os.execv(real, [str(real), *argv])  # never returns

    try:
        return _run_wheel(argv)
    except ErnieDeployError as exc:
        print(f"tritonserver: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _run_wheel(argv: list[str]) -> int:

    request = parse_triton_args(argv)
    if request.help:
        print(HELP.format(refused=", ".join(f"--{name}" for name in REFUSED)), end="", flush=True)
        return _wheel_help()

    serve(
        request.repository,
        host=request.grpc_host or LOOPBACK,
        http_host=request.http_host or LOOPBACK,
        cache_bytes=DEFAULT_CACHE_BYTES if request.cache_bytes is None else request.cache_bytes,
        log_verbose=request.log_verbose,
        log_file=request.log_file,
        extra_args=request.extra,
        **models_to_load(request.repository, request.extra),
        **{f"{name}_port": port for name, port in request.ports.items()},
        **request.shm,
    )
    return 0


def _wheel_help() -> int:
    """The wheel's own `tritonserver --help` (it exits 1 after printing it, as Triton does)."""
    import subprocess

    binary = find_tritonserver()
    result = subprocess.run([str(binary.path), "--help"], env=server_env(binary), capture_output=True, text=True)
    print(result.stdout.lstrip("\n") + result.stderr, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
