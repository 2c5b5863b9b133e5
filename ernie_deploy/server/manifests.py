"""Kubernetes manifests for Triton serving a model repository: a Deployment, a Service and a
HorizontalPodAutoscaler, sized from the repository (`ernie-deploy manifests`).

The objects are built as Python data and written with yaml.safe_dump; the server's arguments come
from args.server_args, the same ones the image's CMD and the pip launcher use. The committed
deploy/k8s/ files are this module's output for models/ (tests/test_deploy.py checks that, and
validates them against the Kubernetes schemas).

The admin key (ernie_deploy.core.admin_key) is a Kubernetes Secret the Deployment mounts, created by
hand with `kubectl create secret` (secret_command()). No Secret object is written: a template with a
placeholder in deploy/k8s/ would be applied with the rest by `kubectl apply -f deploy/k8s/`, and every
cluster would share the placeholder as its key.

gRPC over TLS (`grpc_tls`, `grpc_tls_mutual`): the Deployment mounts a kubernetes.io/tls Secret (tls.crt, tls.key,
and ca.crt for mutual TLS: what cert-manager writes) and points the image's wrapper at its files
(args.GRPC_TLS_*_ENV). The probes are HTTP, which stays plain, and keep working unchanged.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ernie_deploy.core import endpoints
from ernie_deploy.core.admin_key import ADMIN_KEY_FILE_ENV
from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.files import atomic_path
from ernie_deploy.server.args import GRPC_TLS_CA_ENV, GRPC_TLS_CERT_ENV, GRPC_TLS_KEY_ENV, server_args
from ernie_deploy.server.preflight import (
    DEFAULT_SHM_BYTE_SIZE,
    PYTHON_BACKEND_GROWTH_BYTE_SIZE,
    MiB,
    python_instance_count,
    shm_needed,
    shm_size_for,
)

# Where the image keeps the repository (docker/Dockerfile builds it there).
CONTAINER_REPOSITORY = "/models"
# The image's CMD starts tritonserver through docker/restrict-admin-apis.sh, installed under this name.
KEY_WRAPPER = "restrict-admin-apis"
# The Secret holding the admin key is mounted here; the key is its entry SECRET_KEY.
SECRET_MOUNT = "/run/secrets/ernie-deploy"
SECRET_KEY = "admin-key"
# The gRPC TLS Secret (kubernetes.io/tls, plus ca.crt for mutual TLS) is mounted here.
TLS_MOUNT = "/run/secrets/ernie-deploy-grpc-tls"
DEFAULT_IMAGE = "ernie-deploy:0.1.0"
PORTS = tuple(endpoints.PORTS.items())
FILES = ("deployment.yaml", "service.yaml", "hpa.yaml")
# Run inside the container (the image installs the package): exit status 0 only if every ensemble answers.
LIVENESS_COMMAND = ["ernie-deploy", "probe", "--url", f"http://127.0.0.1:{dict(PORTS)['http']}", "--timeout", "5"]

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


def secret_name(name: str) -> str:
    return f"{name}-admin-key"


def tls_secret_name(name: str) -> str:
    return f"{name}-grpc-tls"


def tls_secret_command(name: str = ManifestOptions.name, mutual: bool = False) -> str:
    """The command that creates the gRPC TLS Secret from the server's certificate and key (and the CA that signs
    client certificates). cert-manager's Certificate writes the same Secret, ca.crt included."""
    ca = " --from-file=ca.crt=ca.crt" if mutual else ""
    return (
        f"kubectl create secret generic {tls_secret_name(name)} --type=kubernetes.io/tls "
        f"--from-file=tls.crt=server.crt --from-file=tls.key=server.key{ca}"
    )


def secret_command(name: str = ManifestOptions.name) -> str:
    """The command that creates the Deployment's admin-key Secret from a fresh random key, without the key
    ever being in a file or on a command line."""
    return (
        f"python3 -c 'import secrets; print(secrets.token_urlsafe(32), end=\"\")' | "
        f"kubectl create secret generic {secret_name(name)} --from-file={SECRET_KEY}=/dev/stdin"
    )


def memory_bytes(quantity: str, what: str = "memory") -> int:
    """A Kubernetes memory quantity ("4Gi", "512Mi", "1G", "1073741824") in bytes."""
    match = _QUANTITY.match(str(quantity).strip())
    if not match:
        raise ErnieDeployError(
            f"{what} {quantity!r} is not a Kubernetes memory quantity", "write it like 4Gi, 512Mi or a number of bytes"
        )
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def _mebibytes(n: int) -> str:
    return f"{n // MiB}Mi" if n % MiB == 0 else str(n)


def _check(repository: Path, options: ManifestOptions) -> None:
    if not any(repository.glob("*/config.pbtxt")):
        raise ErnieDeployError(
            f"{repository} is not a model repository (no */config.pbtxt in it)",
            "build one first (ernie-deploy build) or pass the repository the image serves",
        )
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", options.name) or len(options.name) > 63:
        raise ErnieDeployError(
            f"--name {options.name!r} is not a valid Kubernetes name",
            "use lowercase letters, digits and '-', at most 63 characters",
        )
    if not 1 <= options.min_replicas <= options.max_replicas:
        raise ErnieDeployError(
            f"replicas: min {options.min_replicas}, max {options.max_replicas}",
            "give 1 <= --min-replicas <= --max-replicas",
        )
    if not 1 <= options.cpu_target <= 100:
        raise ErnieDeployError(
            f"--cpu-target {options.cpu_target} is not a percentage of the CPU request",
            "give a number from 1 to 100 (70 leaves headroom for bursts while pods start)",
        )
    if not _CPU.match(options.cpu):
        raise ErnieDeployError(f"--cpu {options.cpu!r} is not a Kubernetes CPU quantity", "write it like 2 or 500m")
    if options.gpus < 0:
        raise ErnieDeployError(f"--gpus {options.gpus} is negative", "give 0 (CPU only) or the GPUs per pod")
    if options.shm_default_byte_size < MiB:
        raise ErnieDeployError(
            f"--shm-default-byte-size {options.shm_default_byte_size} is under 1 MiB", f"give at least {MiB} bytes"
        )


def manifests(repository: str | os.PathLike, options: ManifestOptions = ManifestOptions()) -> dict[str, dict]:
    """{file name: Kubernetes object} for serving `repository` (as baked into the image) with `options`."""
    repository = Path(repository)
    _check(repository, options)
    shm_limit = _shm_limit(repository, options)
    labels = {"app.kubernetes.io/name": options.name, "app.kubernetes.io/component": "triton-server"}
    tls = _GrpcTls.of(options)
    return {
        "deployment.yaml": _deployment(options, labels, _container(options, tls), shm_limit, tls),
        "service.yaml": _service(options, labels),
        "hpa.yaml": _autoscaler(options, labels),
    }


def _shm_limit(repository: Path, options: ManifestOptions) -> int:
    """The /dev/shm size the pod gets, checked to fit the memory limit with room for the server's processes."""
    need = shm_needed(repository, options.shm_default_byte_size, options.shm_growth_byte_size, gpus=options.gpus)
    shm_limit = shm_size_for(need)
    request, limit = memory_bytes(options.memory, "--memory"), memory_bytes(options.memory_limit, "--memory-limit")
    # A memory-backed emptyDir is tmpfs: what the models write there is charged to the container's
    # memory, so the limit must hold a full /dev/shm on top of the processes.
    if limit < request or limit < shm_limit + 512 * MiB:
        raise ErnieDeployError(
            f"--memory-limit {options.memory_limit} leaves too little room: it must be at least --memory "
            f"({options.memory}) and /dev/shm's {_mebibytes(shm_limit)} plus 512Mi for the server's processes",
            "raise --memory-limit, or lower the shared memory per instance (--shm-default-byte-size)",
        )
    return shm_limit


@dataclass(frozen=True)
class _GrpcTls:
    """gRPC TLS: the Secret's files, named to the image's wrapper (which adds the flags), and where it is mounted;
    all empty without TLS."""

    env: tuple = ()
    mounts: tuple = ()
    volumes: tuple = ()

    @classmethod
    def of(cls, options: ManifestOptions) -> _GrpcTls:
        if not (options.grpc_tls or options.grpc_tls_mutual):
            return cls()
        files = {GRPC_TLS_CERT_ENV: "tls.crt", GRPC_TLS_KEY_ENV: "tls.key"}
        if options.grpc_tls_mutual:
            files[GRPC_TLS_CA_ENV] = "ca.crt"
        return cls(
            env=tuple({"name": env, "value": f"{TLS_MOUNT}/{file}"} for env, file in files.items()),
            mounts=({"name": "grpc-tls", "mountPath": TLS_MOUNT, "readOnly": True},),
            volumes=({"name": "grpc-tls", "secret": {"secretName": tls_secret_name(options.name)}},),
        )


def _container(options: ManifestOptions, tls: _GrpcTls) -> dict:
    """The triton container: the image's wrapper and server arguments, the admin key, ports, resources, probes."""
    probe = {"httpGet": {"path": "/v2/health/ready", "port": "http"}, "timeoutSeconds": 2}
    limits: dict[str, object] = {"memory": options.memory_limit}
    if options.gpus:
        limits["nvidia.com/gpu"] = options.gpus
    return {
        "name": "triton",
        "image": options.image,
        # The image's ENTRYPOINT stays; these replace its CMD with the same key wrapper and server_args()
        # output, so the shared-memory sizes below and the sizes the server uses cannot differ.
        "args": [
            KEY_WRAPPER,
            "tritonserver",
            *server_args(
                CONTAINER_REPOSITORY,
                shm_default_byte_size=options.shm_default_byte_size,
                shm_growth_byte_size=options.shm_growth_byte_size,
            ),
        ],
        # The wrapper reads the admin key from the Secret's file (a missing Secret keeps the pod from starting).
        "env": [{"name": ADMIN_KEY_FILE_ENV, "value": f"{SECRET_MOUNT}/{SECRET_KEY}"}, *tls.env],
        "ports": [{"name": name, "containerPort": port, "protocol": "TCP"} for name, port in PORTS],
        "resources": {"requests": {"cpu": options.cpu, "memory": options.memory}, "limits": limits},
        "volumeMounts": [
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": "admin-key", "mountPath": SECRET_MOUNT, "readOnly": True},
            *tls.mounts,
        ],
        # Models load before the HTTP endpoint answers at all: up to 5 minutes before liveness counts.
        "startupProbe": {**probe, "periodSeconds": 5, "failureThreshold": 60},
        # Out of the Service while any model is unloaded or the server is draining.
        "readinessProbe": {**probe, "periodSeconds": 5, "failureThreshold": 3},
        # /v2/health/live stays 200 when a python-backend stub has died and its model fails every request
        # (Triton does not restart stubs), so liveness sends a real text through every ensemble instead.
        # Generous timings: a pod that is merely busy queues the probe behind real requests, and must not be
        # restarted for it; a dead stub fails at once, and the pod restarts within a minute.
        "livenessProbe": {
            "exec": {"command": LIVENESS_COMMAND},
            "timeoutSeconds": 30,
            "periodSeconds": 20,
            "failureThreshold": 3,
        },
    }


def _deployment(options: ManifestOptions, labels: dict, container: dict, shm_limit: int, tls: _GrpcTls) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": options.name, "labels": labels},
        # No spec.replicas: the autoscaler owns the count, and `kubectl apply` would reset it.
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    # On SIGTERM Triton drains in-flight requests and unloads the models before it exits.
                    "terminationGracePeriodSeconds": 30,
                    "containers": [container],
                    "volumes": [
                        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": _mebibytes(shm_limit)}},
                        {"name": "admin-key", "secret": {"secretName": secret_name(options.name)}},
                        *tls.volumes,
                    ],
                },
            },
        },
    }


def _service(options: ManifestOptions, labels: dict) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": options.name, "labels": labels},
        "spec": {
            "type": "ClusterIP",  # inside the cluster only; expose it deliberately (Ingress, LoadBalancer)
            "selector": labels,
            "ports": [{"name": name, "port": port, "targetPort": name, "protocol": "TCP"} for name, port in PORTS],
        },
    }


def _autoscaler(options: ManifestOptions, labels: dict) -> dict:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": options.name, "labels": labels},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": options.name},
            "minReplicas": options.min_replicas,
            "maxReplicas": options.max_replicas,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": options.cpu_target},
                    },
                }
            ],
        },
    }


def _header(name: str, repository: Path, options: ManifestOptions) -> str:
    text = (
        f"# Generated by `ernie-deploy manifests` from the model repository {repository.name}/: "
        "change the repository or the options and regenerate, do not edit.\n"
    )
    if name == "deployment.yaml":
        instances = python_instance_count(repository, options.gpus)
        need = shm_needed(repository, options.shm_default_byte_size, options.shm_growth_byte_size, gpus=options.gpus)
        text += (
            f"# /dev/shm: {instances} python-backend instance(s) x ({_mebibytes(options.shm_default_byte_size)} "
            f"region + {_mebibytes(options.shm_growth_byte_size)} growth) = {_mebibytes(need)} needed; "
            f"the emptyDir allows {_mebibytes(shm_size_for(need))} "
            "(twice the need in 64Mi steps, at least 256Mi).\n"
            f"# Admin key (guards loading and unloading models): create the Secret {secret_name(options.name)} once:\n"
            f"#   {secret_command(options.name)}\n"
        )
        if options.grpc_tls or options.grpc_tls_mutual:
            mutual = options.grpc_tls_mutual
            text += (
                f"# gRPC over {'mutual ' if mutual else ''}TLS: create the Secret {tls_secret_name(options.name)} "
                "from the server's certificate and key"
                + (" and the CA of the clients' certificates" if mutual else "")
                + f" (HTTP and the probes stay plain):\n#   {tls_secret_command(options.name, mutual)}\n"
            )
    return text


def render(repository: str | os.PathLike, options: ManifestOptions = ManifestOptions()) -> dict[str, str]:
    """{file name: YAML text} as `write` writes them."""
    try:
        import yaml
    except ImportError:
        raise ErnieDeployError("PyYAML is not installed", "pip install PyYAML (it is in the dev extra)") from None

    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data) -> bool:  # repeated label maps written out, not as &id001 anchors
            return True

    repository = Path(repository)
    objects = manifests(repository, options)
    return {
        name: _header(name, repository, options)
        + yaml.dump(obj, Dumper=Dumper, sort_keys=False, default_flow_style=False, width=120)
        for name, obj in objects.items()
    }


def write(
    repository: str | os.PathLike, out: str | os.PathLike, options: ManifestOptions = ManifestOptions()
) -> list[Path]:
    """Write the manifests into `out`, each file atomically; returns their paths."""
    texts = render(repository, options)  # everything is computed before anything is written
    paths = []
    for name, text in texts.items():
        path = Path(out) / name
        with atomic_path(path) as tmp:
            tmp.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths
