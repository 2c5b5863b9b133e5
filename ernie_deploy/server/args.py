"""The tritonserver command line every deployment of a repository shares: the pip launcher, the image's CMD
and the Kubernetes Deployment; and the flags that put the admin APIs behind a key, which only the process
that holds the key adds (the launcher, docker/restrict-admin-apis.sh in the image and on Kubernetes)."""

from __future__ import annotations

import os

from ernie_deploy.core.admin_key import ADMIN_KEY_HEADER, RESTRICTED_APIS
from ernie_deploy.server.preflight import DEFAULT_SHM_BYTE_SIZE, PYTHON_BACKEND_GROWTH_BYTE_SIZE


def server_args(
    model_repository: str | os.PathLike,
    *,
    shm_default_byte_size: int = DEFAULT_SHM_BYTE_SIZE,
    shm_growth_byte_size: int = PYTHON_BACKEND_GROWTH_BYTE_SIZE,
) -> list[str]:
    """The tritonserver arguments every deployment of a repository shares (no binary, ports or addresses).

    The one source for them: TritonServer.command() starts with these, the image's CMD
    (docker/Dockerfile) and the Kubernetes Deployment (`ernie-deploy manifests`) are these for
    /models, and tests/test_deploy.py checks that they stay equal.
    """
    return [
        f"--model-repository={model_repository}",
        # A model that fails to load makes the server exit (a launcher reports why, a container
        # restarts) instead of serving the rest; strict readiness keeps /v2/health/ready false
        # until every model is loaded.
        "--exit-on-error=true",
        "--strict-readiness=true",
        # The generated config.pbtxt files are complete and checked; the server must not amend them.
        "--disable-auto-complete-config",
        # Python-backend shared memory: a region per instance, grown in steps (see DEFAULT_SHM_BYTE_SIZE).
        f"--backend-config=python,shm-default-byte-size={shm_default_byte_size}",
        f"--backend-config=python,shm-growth-byte-size={shm_growth_byte_size}",
    ]


def restricted_args(key: str) -> list[str]:
    """The flags that make HTTP and gRPC answer the model-repository and model-config APIs only to requests
    carrying the header ADMIN_KEY_HEADER with `key` (over gRPC, GRPC_ADMIN_KEY_HEADER: Triton adds a prefix).

    The form is `<apis>:<header>=<key>`: `tritonserver --help` (2.51) shows a comma before the header, but
    the binary refuses that ("option format is '<config name>:<setting>=<value>'").

    Never part of server_args(): those are baked into the image and the manifests, a key must not be.
    docker/restrict-admin-apis.sh writes the same two flags (tests/test_admin_key.py compares them). They
    put the key on tritonserver's command line, readable in /proc/<pid>/cmdline by whoever can see the
    process: Triton 2.51 takes it no other way.
    """
    apis = ",".join(RESTRICTED_APIS)
    return [
        f"--http-restricted-api={apis}:{ADMIN_KEY_HEADER}={key}",
        f"--grpc-restricted-protocol={apis}:{ADMIN_KEY_HEADER}={key}",
    ]
