"""Kubernetes objects for Triton serving a model repository: a Deployment (Triton, and the HTTP gateway beside it in
the same pod), a Service and a HorizontalPodAutoscaler, sized from the repository. The committed deploy/k8s/ files
are their output for models/ (tests/test_deploy.py checks that, and validates them against the Kubernetes schemas).

The autoscaler's CPU target is a percentage of the pod's request, Triton's and the gateway's added up (a Resource
metric averages the pod's containers), which both grow with the requests served."""

from __future__ import annotations

import os
from pathlib import Path

from ernie_deploy.deployfiles.options import ManifestOptions, check_manifest_options, shm_limit
from ernie_deploy.deployfiles.pod import GATEWAY, GATEWAY_PORT, PORTS, GrpcTls, container, pod_spec

FILES = ("deployment.yaml", "service.yaml", "hpa.yaml")


def manifests(repository: str | os.PathLike, options: ManifestOptions = ManifestOptions()) -> dict[str, dict]:
    """{file name: Kubernetes object} for serving `repository` (as baked into the image) with `options`."""
    repository = Path(repository)
    check_manifest_options(repository, options)
    shm = shm_limit(repository, options)
    labels = {"app.kubernetes.io/name": options.name, "app.kubernetes.io/component": "triton-server"}
    tls = GrpcTls.of(options)
    return {
        "deployment.yaml": _deployment(options, labels, pod_spec(options, container(options, tls), shm, tls)),
        "service.yaml": _service(options, labels),
        "hpa.yaml": _autoscaler(options, labels),
    }


def _deployment(options: ManifestOptions, labels: dict, pod: dict) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": options.name, "labels": labels},
        # No spec.replicas: the autoscaler owns the count, and `kubectl apply` would reset it.
        "spec": {"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": pod}},
    }


def _service(options: ManifestOptions, labels: dict) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": options.name, "labels": labels},
        "spec": {
            "type": "ClusterIP",  # inside the cluster only; expose it deliberately (Ingress, LoadBalancer)
            "selector": labels,
            "ports": [
                {"name": name, "port": port, "targetPort": name, "protocol": "TCP"}
                for name, port in (*PORTS, *([(GATEWAY, GATEWAY_PORT)] if options.gateway else []))
            ],
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
