"""The tritonserver command line every deployment of a repository shares: the pip launcher, the image's CMD
and the Kubernetes Deployment; and the flags that put the admin APIs behind a key, which only the process
that holds the key adds (the launcher, docker/restrict-admin-apis.sh in the image and on Kubernetes)."""

from __future__ import annotations

import os

from ernie_deploy.core.admin_key import ADMIN_KEY_HEADER, RESTRICTED_APIS
from ernie_deploy.server.cache import DEFAULT_CACHE_BYTES, cache_config_args
from ernie_deploy.server.preflight import DEFAULT_SHM_BYTE_SIZE, PYTHON_BACKEND_GROWTH_BYTE_SIZE


def server_args(
    model_repository: str | os.PathLike,
    *,
    shm_default_byte_size: int = DEFAULT_SHM_BYTE_SIZE,
    shm_growth_byte_size: int = PYTHON_BACKEND_GROWTH_BYTE_SIZE,
    cache_bytes: int = DEFAULT_CACHE_BYTES,
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
        # The response cache that models built with --cache answer from; on for every deployment (server/cache.py).
        *cache_config_args(cache_bytes),
        # Latency quantiles for the Grafana dashboard (deployfiles/dashboard.py): Triton 2.51 then exports a summary
        # per model beside each duration counter, nv_inference_{request,queue,compute_*}_summary_us, quantiles 0.5 to
        # 0.999 over the last minute; without it Prometheus gets only cumulative sums, i.e. means. Measured on the pip
        # server with 11 models: /metrics grew from 14,726 to 49,581 bytes per scrape.
        "--metrics-config=summary_latencies=true",
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


# The image's wrapper (docker/restrict-admin-apis.sh) adds grpc_tls_args() for the files these name (the Kubernetes
# Deployment sets them to its TLS Secret's files; tests/test_tls.py runs the script and compares).
GRPC_TLS_CERT_ENV = "ERNIE_DEPLOY_GRPC_TLS_CERT"
GRPC_TLS_KEY_ENV = "ERNIE_DEPLOY_GRPC_TLS_KEY"
GRPC_TLS_CA_ENV = "ERNIE_DEPLOY_GRPC_TLS_CA"


def grpc_tls_args(cert: str | os.PathLike, key: str | os.PathLike, ca: str | os.PathLike | None = None) -> list[str]:
    """The flags that make tritonserver (2.51) serve gRPC over TLS with `cert` and `key`, and with `ca` mutual TLS:
    a client must present a certificate `ca` signed. HTTP and metrics stay plain: Triton has no TLS for them."""
    args = ["--grpc-use-ssl=true", f"--grpc-server-cert={cert}", f"--grpc-server-key={key}"]
    if ca is not None:
        args += ["--grpc-use-ssl-mutual=true", f"--grpc-root-cert={ca}"]
    return args
