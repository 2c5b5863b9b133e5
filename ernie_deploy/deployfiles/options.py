"""What `ernie-deploy manifests` is asked for (ManifestOptions), checked before anything is built: Kubernetes
names and quantities, replica bounds, and a memory limit that holds the /dev/shm the repository needs."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ernie_deploy.core.errors import BadOptionsError, BadRepositoryError
from ernie_deploy.server.preflight import (
    DEFAULT_SHM_BYTE_SIZE,
    PYTHON_BACKEND_GROWTH_BYTE_SIZE,
    MiB,
    shm_needed,
    shm_size_for,
)

DEFAULT_IMAGE = "ernie-deploy:0.1.0"

_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?$")
_UNITS = {
    None: 1,
    "Ki": 1 << 10,
    "Mi": 1 << 20,
    "Gi": 1 << 30,
    "Ti": 1 << 40,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
}
_CPU = re.compile(r"^(?:[0-9]+(?:\.[0-9]+)?|[0-9]+m)$")


@dataclass(frozen=True)
class ManifestOptions:
    image: str = DEFAULT_IMAGE
    name: str = "ernie-deploy"
    min_replicas: int = 1
    max_replicas: int = 4
    cpu_target: int = 70  # HPA: average CPU use, percent of the request
    cpu: str = "2"  # request per pod; the HPA's percentages are of this
    memory: str = "2Gi"  # request per pod
    memory_limit: str = "4Gi"  # holds the processes *and* what they write to /dev/shm
    gpus: int = 0
    shm_default_byte_size: int = DEFAULT_SHM_BYTE_SIZE
    shm_growth_byte_size: int = PYTHON_BACKEND_GROWTH_BYTE_SIZE
    grpc_tls: bool = False  # serve gRPC over TLS with the Secret tls_secret_name(name)
    grpc_tls_mutual: bool = False  # and require client certificates signed by its ca.crt (implies grpc_tls)
    # The HTTP gateway (`ernie-deploy gateway`) as a second container of the pod, calling Triton on 127.0.0.1.
    gateway: bool = True
    # Measured (`serve --gateway`, tiny classifier): the gateway holds 75 MB resident idle and 80 MB after 2,000
    # requests of 8 texts at 64 at once. Its bounds (64 requests at once, 4 MiB bodies) let it hold 256 MiB of bodies
    # more, and their decoded texts: the limit holds that with room. One event loop, so about one core at most: the
    # request is half of one, and no CPU limit lets it burst to the whole core.
    gateway_cpu: str = "500m"
    gateway_memory: str = "256Mi"
    gateway_memory_limit: str = "1Gi"


def memory_bytes(quantity: str, what: str = "memory") -> int:
    """A Kubernetes memory quantity ("4Gi", "512Mi", "1G", "1073741824") in bytes."""
    match = _QUANTITY.match(str(quantity).strip())
    if not match:
        raise BadOptionsError(
            f"{what} {quantity!r} is not a Kubernetes memory quantity", "write it like 4Gi, 512Mi or a number of bytes"
        )
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def mebibytes(n: int) -> str:
    """Bytes as a Kubernetes quantity: whole mebibytes as NMi, anything else as the number."""
    return f"{n // MiB}Mi" if n % MiB == 0 else str(n)


def check_manifest_options(repository: Path, options: ManifestOptions) -> None:
    """Refuse a folder that is no model repository and manifest options Kubernetes would reject, before any file
    is written."""
    if not any(repository.glob("*/config.pbtxt")):
        raise BadRepositoryError(
            f"{repository} is not a model repository (no */config.pbtxt in it)",
            "build one first (ernie-deploy build) or pass the repository the image serves",
        )
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", options.name) or len(options.name) > 63:
        raise BadOptionsError(
            f"--app-name {options.name!r} is not a valid Kubernetes name",
            "use lowercase letters, digits and '-', at most 63 characters",
        )
    if not 1 <= options.min_replicas <= options.max_replicas:
        raise BadOptionsError(
            f"replicas: min {options.min_replicas}, max {options.max_replicas}",
            "give 1 <= --min-replicas <= --max-replicas",
        )
    if not 1 <= options.cpu_target <= 100:
        raise BadOptionsError(
            f"--cpu-target {options.cpu_target} is not a percentage of the CPU request",
            "give a number from 1 to 100 (70 leaves headroom for bursts while pods start)",
        )
    if not _CPU.match(options.cpu):
        raise BadOptionsError(f"--cpu {options.cpu!r} is not a Kubernetes CPU quantity", "write it like 2 or 500m")
    if options.gpus < 0:
        raise BadOptionsError(f"--gpus {options.gpus} is negative", "give 0 (CPU only) or the GPUs per pod")
    if options.gateway:
        _check_gateway(options)
    if options.shm_default_byte_size < MiB:
        raise BadOptionsError(
            f"--shm-default-byte-size {options.shm_default_byte_size} is under 1 MiB", f"give at least {MiB} bytes"
        )


def _check_gateway(options: ManifestOptions) -> None:
    if options.grpc_tls or options.grpc_tls_mutual:
        # Triton's gRPC port serves TLS alone, so the sidecar would dial 127.0.0.1:8001 over TLS: it would need the CA
        # of the server's certificate (the Secret holds ca.crt only under mutual TLS, and then it is the clients' CA),
        # a server certificate that names 127.0.0.1 (it names the Service), and under mutual TLS a client
        # certificate of its own. Not something one Secret written by cert-manager gives.
        raise BadOptionsError(
            "the gateway container reaches Triton on 127.0.0.1 inside the pod, and with --grpc-tls that port speaks "
            "TLS only, with a certificate issued for the Service's name, not 127.0.0.1, and no CA in the Secret the "
            "gateway could trust it by (nor, under mutual TLS, a client certificate for it)",
            "add --no-gateway to leave the gateway out (and run `ernie-deploy gateway --tls-ca ...` where it can "
            "verify the server), or serve gRPC without --grpc-tls inside the cluster and terminate TLS at the ingress",
        )
    if not _CPU.match(options.gateway_cpu):
        raise BadOptionsError(
            f"--gateway-cpu {options.gateway_cpu!r} is not a Kubernetes CPU quantity", "write it like 1 or 500m"
        )
    request = memory_bytes(options.gateway_memory, "--gateway-memory")
    if memory_bytes(options.gateway_memory_limit, "--gateway-memory-limit") < request:
        raise BadOptionsError(
            f"--gateway-memory-limit {options.gateway_memory_limit} is under --gateway-memory {options.gateway_memory}",
            "give a limit at least the request",
        )


def shm_limit(repository: Path, options: ManifestOptions) -> int:
    """The /dev/shm size the pod gets, checked to fit the memory limit with room for the server's processes."""
    need = shm_needed(repository, options.shm_default_byte_size, options.shm_growth_byte_size, gpus=options.gpus)
    limit_shm = shm_size_for(need)
    request, limit = memory_bytes(options.memory, "--memory"), memory_bytes(options.memory_limit, "--memory-limit")
    # A memory-backed emptyDir is tmpfs: what the models write there is charged to the container's
    # memory, so the limit must hold a full /dev/shm on top of the processes.
    if limit < request or limit < limit_shm + 512 * MiB:
        raise BadOptionsError(
            f"--memory-limit {options.memory_limit} leaves too little room: it must be at least --memory "
            f"({options.memory}) and /dev/shm's {mebibytes(limit_shm)} plus 512Mi for the server's processes",
            "raise --memory-limit, or lower the shared memory per instance (--shm-default-byte-size)",
        )
    return limit_shm
