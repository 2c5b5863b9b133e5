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

For clusters that run KServe, inference_service() builds the same pod as a KServe InferenceService
(`ernie-deploy manifests --kserve`, committed as deploy/kserve/inferenceservice.yaml; tests/test_kserve.py validates
it with the KServe SDK's own types and checks its container against the Deployment's). Both are built from one pod
spec (_pod_spec) and one container (_container), so the image, command line, Secrets, probes, resources and /dev/shm
differ only where KServe needs it: the container's name, its protocol variable and a CPU limit (_kserve_container).
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
# `ernie-deploy manifests --kserve` writes this one file instead of FILES.
KSERVE_FILE = "inferenceservice.yaml"
# KServe serves a custom predictor from the container of this name (its webhook renames a lone container to it, so
# writing it here keeps `kubectl apply` from seeing a difference on every run).
KSERVE_CONTAINER = "kserve-container"
# A custom predictor declares its protocol in this variable (KServe's default is v1); Triton speaks v2, the Open
# Inference Protocol, which KServe's transformers and inference graphs then use to call it.
KSERVE_PROTOCOL_ENV = {"name": "PROTOCOL", "value": "v2"}
# KServe's predictor Deployment and Service are named NAME-predictor, and a Service name has at most 63 characters.
KSERVE_NAME = re.compile(r"[a-z]([-a-z0-9]{0,51}[a-z0-9])?")
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
        "deployment.yaml": _deployment(options, labels, _pod_spec(options, _container(options, tls), shm_limit, tls)),
        "service.yaml": _service(options, labels),
        "hpa.yaml": _autoscaler(options, labels),
    }


def inference_service(repository: str | os.PathLike, options: ManifestOptions = ManifestOptions()) -> dict:
    """The KServe InferenceService serving `repository` (as baked into the image) with `options`: the Deployment's
    pod as a custom predictor, scaled on CPU by the HPA KServe creates."""
    repository = Path(repository)
    _check(repository, options)
    if not KSERVE_NAME.fullmatch(options.name):
        raise ErnieDeployError(
            f"--name {options.name!r} cannot name a KServe InferenceService",
            "start it with a letter and keep it to 53 characters (KServe adds -predictor to it, "
            "and a Service name has at most 63)",
        )
    shm_limit = _shm_limit(repository, options)
    tls = _GrpcTls.of(options)
    return _inference_service(options, _pod_spec(options, _kserve_container(options, tls), shm_limit, tls))


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


def _kserve_container(options: ManifestOptions, tls: _GrpcTls) -> dict:
    """The Deployment's container under KServe's name, with KServe's protocol marker and a CPU limit."""
    container = _container(options, tls)
    resources = container["resources"]
    return {
        **container,
        "name": KSERVE_CONTAINER,
        "env": [*container["env"], dict(KSERVE_PROTOCOL_ENV)],
        # KServe's webhook gives a container without a CPU limit the cluster default (resource.cpuLimit in its
        # inferenceservice-config, 1 CPU as shipped), below the default request of 2, and Kubernetes refuses a pod
        # whose limit is under its request. The Deployment leaves CPU unlimited so a pod can burst; here the limit
        # is the request.
        "resources": {**resources, "limits": {"cpu": options.cpu, **resources["limits"]}},
    }


def _pod_spec(options: ManifestOptions, container: dict, shm_limit: int, tls: _GrpcTls) -> dict:
    """The pod both the Deployment and the InferenceService run: the container, /dev/shm, the admin key, TLS."""
    return {
        # On SIGTERM Triton drains in-flight requests and unloads the models before it exits.
        "terminationGracePeriodSeconds": 30,
        "containers": [container],
        "volumes": [
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": _mebibytes(shm_limit)}},
            {"name": "admin-key", "secret": {"secretName": secret_name(options.name)}},
            *tls.volumes,
        ],
    }


def _deployment(options: ManifestOptions, labels: dict, pod: dict) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": options.name, "labels": labels},
        # No spec.replicas: the autoscaler owns the count, and `kubectl apply` would reset it.
        "spec": {"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": pod}},
    }


def _inference_service(options: ManifestOptions, pod: dict) -> dict:
    """A custom predictor (predictor.containers) in KServe's Standard deployment mode.

    Not predictor.triton nor predictor.model with modelFormat triton: those run KServe's tritonserver runtime with its
    own arguments (--model-store=/mnt/models, --http-port=8080, --grpc-port=9000) and expect a storageUri to fill
    /mnt/models, while this image already holds the repository at /models and must start through its admin-key
    wrapper with server_args(). A custom container runs exactly the Deployment's command line, and with no
    storageUri (nor STORAGE_URI variable) KServe adds no storage initializer.

    Standard mode (KServe 0.16 and later; earlier releases call it RawDeployment) makes a plain Deployment, Service,
    HPA and Ingress from this, so the pod keeps what Knative mode does not allow: three ports (Knative exposes one),
    several volumes, the exec liveness probe. KServe's Service NAME-predictor sends port 80 to the first container
    port (http, 8000), which its Ingress routes to, and keeps gRPC (8001, over TLS with --grpc-tls) and metrics (8002)
    on their own numbers, as the Deployment's Service does. The probes name the port http, which is 8000 here as
    well. autoscalerClass hpa asks for the HPA that scaleMetric and scaleTarget configure; KServe's validator accepts
    scaleMetric cpu only for that class.
    """
    return {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {
            "name": options.name,
            # Not the Deployment's component label: if both land in one namespace, its selector, Service and
            # autoscaler must not take in these pods.
            "labels": {"app.kubernetes.io/name": options.name, "app.kubernetes.io/component": "kserve-predictor"},
            "annotations": {
                "serving.kserve.io/deploymentMode": "Standard",
                "serving.kserve.io/autoscalerClass": "hpa",
            },
        },
        "spec": {
            "predictor": {
                # The Deployment's autoscaler, as KServe's HPA: the same bounds and CPU target.
                "minReplicas": options.min_replicas,
                "maxReplicas": options.max_replicas,
                "scaleMetric": "cpu",
                "scaleTarget": options.cpu_target,
                **pod,
            }
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
    if name in ("deployment.yaml", KSERVE_FILE):
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
    if name == KSERVE_FILE:
        text += (
            "# For KServe 0.16 or later (Standard mode): it makes the Deployment, Service and autoscaler "
            f"{options.name}-predictor; `kubectl apply -f` this file instead of deploy/k8s/.\n"
        )
    return text


def render(
    repository: str | os.PathLike, options: ManifestOptions = ManifestOptions(), kserve: bool = False
) -> dict[str, str]:
    """{file name: YAML text} as `write` writes them: FILES, or with `kserve` the InferenceService alone."""
    try:
        import yaml
    except ImportError:
        raise ErnieDeployError("PyYAML is not installed", "pip install PyYAML (it is in the dev extra)") from None

    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data) -> bool:  # repeated label maps written out, not as &id001 anchors
            return True

    repository = Path(repository)
    objects = {KSERVE_FILE: inference_service(repository, options)} if kserve else manifests(repository, options)
    return {
        name: _header(name, repository, options)
        + yaml.dump(obj, Dumper=Dumper, sort_keys=False, default_flow_style=False, width=120)
        for name, obj in objects.items()
    }


def write(
    repository: str | os.PathLike,
    out: str | os.PathLike,
    options: ManifestOptions = ManifestOptions(),
    kserve: bool = False,
) -> list[Path]:
    """Write the manifests (with `kserve`, the InferenceService) into `out`, each file atomically; returns their
    paths. Refuses a folder that holds the other kind: `kubectl apply -f` on it would start the server twice."""
    others = FILES if kserve else (KSERVE_FILE,)
    present = [name for name in others if (Path(out) / name).exists()]
    if present:
        raise ErnieDeployError(
            f"{out} already holds {', '.join(present)}: `kubectl apply -f {out}` would run both the Deployment "
            "and the InferenceService",
            "write each to its own folder (deploy/k8s for the Deployment, deploy/kserve for --kserve)",
        )
    texts = render(repository, options, kserve)  # everything is computed before anything is written
    paths = []
    for name, text in texts.items():
        path = Path(out) / name
        with atomic_path(path) as tmp:
            tmp.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths
