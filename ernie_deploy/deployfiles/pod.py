"""The pod both the Kubernetes Deployment and the KServe InferenceService run: the image's container with the
server's command line, ports, resources and probes, /dev/shm, and the Secrets it mounts.

The server's arguments come from server.args.server_args, the same ones the image's CMD and the pip launcher use.

The admin key (ernie_deploy.core.admin_key) is a Kubernetes Secret the pod mounts, created by hand with
`kubectl create secret` (secret_command()). No Secret object is written: a template with a placeholder in
deploy/k8s/ would be applied with the rest by `kubectl apply -f deploy/k8s/`, and every cluster would share the
placeholder as its key.

gRPC over TLS (`grpc_tls`, `grpc_tls_mutual`): the pod mounts a kubernetes.io/tls Secret (tls.crt, tls.key, and
ca.crt for mutual TLS: what cert-manager writes) and points the image's wrapper at its files (args.GRPC_TLS_*_ENV).
The probes are HTTP, which stays plain, and keep working unchanged.

The HTTP gateway (`ernie-deploy gateway`, SimpleServing's and Hugging Face's JSON) runs as a second container of the
same pod (`options.gateway`, on by default): the same image, so the same package and the same /models, whose records
it reads; it calls Triton's gRPC on 127.0.0.1, inside the pod's network namespace, so no extra network hop and no
TLS hop; and it has its own resources, probes and restarts, so a gateway that crashes or runs out of memory is
restarted alone while Triton keeps its loaded models. Under gRPC TLS it is refused (options._check_gateway says why).
"""

from __future__ import annotations

from dataclasses import dataclass

from ernie_deploy.core import endpoints
from ernie_deploy.core.admin_key import ADMIN_KEY_FILE_ENV
from ernie_deploy.deployfiles.options import ManifestOptions, mebibytes
from ernie_deploy.server.args import GRPC_TLS_CA_ENV, GRPC_TLS_CERT_ENV, GRPC_TLS_KEY_ENV, server_args

# Where the image keeps the repository (docker/Dockerfile builds it there).
CONTAINER_REPOSITORY = "/models"
# The image's CMD starts tritonserver through docker/restrict-admin-apis.sh, installed under this name.
KEY_WRAPPER = "restrict-admin-apis"
# The Secret holding the admin key is mounted here; the key is its entry SECRET_KEY.
SECRET_MOUNT = "/run/secrets/ernie-deploy"
SECRET_KEY = "admin-key"
# The gRPC TLS Secret (kubernetes.io/tls, plus ca.crt for mutual TLS) is mounted here.
TLS_MOUNT = "/run/secrets/ernie-deploy-grpc-tls"
PORTS = tuple(endpoints.PORTS.items())
# Run inside the container (the image installs the package): exit status 0 only if every ensemble answers.
LIVENESS_COMMAND = ["ernie-deploy", "probe", "--http-url", f"http://127.0.0.1:{dict(PORTS)['http']}", "--timeout", "5"]
# The gateway container's name, and its port's (on the container and the Service).
GATEWAY = "gateway"
# The gateway's own default port (gateway.defaults.DEFAULT_PORT, a layer above this one: tests/test_deploy.py checks
# the two are equal).
GATEWAY_PORT = 8080
# Run by the image's entrypoint in the gateway container: Triton's gRPC on the pod's loopback, the repository the
# image holds, listening on every interface of the pod (the Service and the kubelet's probes reach it there).
GATEWAY_COMMAND = [
    "ernie-deploy", "gateway", "--repository", CONTAINER_REPOSITORY, "--grpc-url", f"127.0.0.1:{dict(PORTS)['grpc']}",
    "--host", "0.0.0.0", "--port", str(GATEWAY_PORT),
]  # fmt: skip


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


@dataclass(frozen=True)
class GrpcTls:
    """gRPC TLS: the Secret's files, named to the image's wrapper (which adds the flags), and where it is mounted;
    all empty without TLS."""

    env: tuple = ()
    mounts: tuple = ()
    volumes: tuple = ()

    @classmethod
    def of(cls, options: ManifestOptions) -> GrpcTls:
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


def container(options: ManifestOptions, tls: GrpcTls) -> dict:
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


def gateway_container(options: ManifestOptions) -> dict:
    """The gateway sidecar: the image's `ernie-deploy gateway` on Triton's loopback gRPC, its port, resources, probes.
    It needs neither the admin key (it only infers and asks readiness) nor /dev/shm."""
    return {
        "name": GATEWAY,
        "image": options.image,
        "args": GATEWAY_COMMAND,  # the image's ENTRYPOINT stays, as for the triton container
        "ports": [{"name": GATEWAY, "containerPort": GATEWAY_PORT, "protocol": "TCP"}],
        # No CPU limit, as Triton's: one event loop bursts to its core under load.
        "resources": {
            "requests": {"cpu": options.gateway_cpu, "memory": options.gateway_memory},
            "limits": {"memory": options.gateway_memory_limit},
        },
        # /ready is 200 only while Triton and every served model are: out of the Service's gateway port otherwise,
        # as Triton's own readiness takes the pod out of its ports.
        "readinessProbe": {
            "httpGet": {"path": "/ready", "port": GATEWAY},
            "timeoutSeconds": 2,
            "periodSeconds": 5,
            "failureThreshold": 3,
        },
        # /health is 200 while the gateway's event loop answers, whatever Triton does: a restart for a stuck gateway
        # alone, never for a Triton that is loading or restarting (readiness covers that). It answers within 2-3 s of
        # the start, well inside the 30 s the first failures take.
        "livenessProbe": {
            "httpGet": {"path": "/health", "port": GATEWAY},
            "timeoutSeconds": 5,
            "periodSeconds": 10,
            "failureThreshold": 3,
        },
    }


def pod_spec(options: ManifestOptions, server: dict, shm_limit: int, tls: GrpcTls) -> dict:
    """The pod both the Deployment and the InferenceService run: the container, the gateway beside it unless
    options.gateway is off, /dev/shm, the admin key, TLS."""
    return {
        # On SIGTERM Triton drains in-flight requests and unloads the models before it exits; the gateway finishes
        # its requests in flight within the same 30 s.
        "terminationGracePeriodSeconds": 30,
        "containers": [server, gateway_container(options)] if options.gateway else [server],
        "volumes": [
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": mebibytes(shm_limit)}},
            {"name": "admin-key", "secret": {"secretName": secret_name(options.name)}},
            *tls.volumes,
        ],
    }
