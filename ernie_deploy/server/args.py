"""The tritonserver command line every deployment of a repository shares: the pip launcher, the image's CMD
and the Kubernetes Deployment."""

from __future__ import annotations

import os

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
