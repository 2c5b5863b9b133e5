"""For clusters that run KServe: the Deployment's pod as a KServe InferenceService (`ernie-deploy manifests
--kserve`, committed as deploy/kserve/inferenceservice.yaml; tests/test_kserve.py validates it with the KServe SDK's
own types and checks its container against the Deployment's). Both are built from one pod spec (pod.pod_spec) and
one container (pod.container), so the image, command line, Secrets, probes, resources and /dev/shm differ only where
KServe needs it: the container's name, its protocol variable and a CPU limit (kserve_container). The gateway sidecar
(pod.gateway_container) is the Deployment's, unchanged, second in the predictor's containers.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ernie_deploy.core.errors import BadOptionsError
from ernie_deploy.deployfiles.options import ManifestOptions, check_manifest_options, shm_limit
from ernie_deploy.deployfiles.pod import GrpcTls, container, pod_spec

# `ernie-deploy manifests --kserve` writes this one file instead of kubernetes.FILES.
KSERVE_FILE = "inferenceservice.yaml"
# KServe serves a custom predictor from the container of this name (its webhook renames a lone container to it, so
# writing it here keeps `kubectl apply` from seeing a difference on every run).
KSERVE_CONTAINER = "kserve-container"
# A custom predictor declares its protocol in this variable (KServe's default is v1); Triton speaks v2, the Open
# Inference Protocol, which KServe's transformers and inference graphs then use to call it.
KSERVE_PROTOCOL_ENV = {"name": "PROTOCOL", "value": "v2"}
# KServe's predictor Deployment and Service are named NAME-predictor, and a Service name has at most 63 characters.
KSERVE_NAME = re.compile(r"[a-z]([-a-z0-9]{0,51}[a-z0-9])?")


def inference_service(repository: str | os.PathLike, options: ManifestOptions = ManifestOptions()) -> dict:
    """The KServe InferenceService serving `repository` (as baked into the image) with `options`: the Deployment's
    pod as a custom predictor, scaled on CPU by the HPA KServe creates."""
    repository = Path(repository)
    check_manifest_options(repository, options)
    if not KSERVE_NAME.fullmatch(options.name):
        raise BadOptionsError(
            f"--app-name {options.name!r} cannot name a KServe InferenceService",
            "start it with a letter and keep it to 53 characters (KServe adds -predictor to it, "
            "and a Service name has at most 63)",
        )
    shm = shm_limit(repository, options)
    tls = GrpcTls.of(options)
    return _inference_service(options, pod_spec(options, kserve_container(options, tls), shm, tls))


def kserve_container(options: ManifestOptions, tls: GrpcTls) -> dict:
    """The Deployment's container under KServe's name, with KServe's protocol marker and a CPU limit."""
    server = container(options, tls)
    resources = server["resources"]
    return {
        **server,
        "name": KSERVE_CONTAINER,
        "env": [*server["env"], dict(KSERVE_PROTOCOL_ENV)],
        # KServe's webhook gives a container without a CPU limit the cluster default (resource.cpuLimit in its
        # inferenceservice-config, 1 CPU as shipped), below the default request of 2, and Kubernetes refuses a pod
        # whose limit is under its request. The Deployment leaves CPU unlimited so a pod can burst; here the limit
        # is the request.
        "resources": {**resources, "limits": {"cpu": options.cpu, **resources["limits"]}},
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

    The gateway is a second container of the predictor, as in the Deployment's pod: KServe serves the predictor from
    the container named kserve-container and leaves another container as it is written, a sidecar. Its Service
    takes its ports from kserve-container alone, so port 80 and the ingress stay on Triton's HTTP, and the gateway's
    port 8080 is reached through a Service of its own (the file's header gives the `kubectl expose` command). The
    name KServe would route to instead, transformer-container, is not used: KServe gives a transformer its own
    arguments and environment, which `ernie-deploy gateway` does not take.
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
