"""deploy/kserve/inferenceservice.yaml, the KServe form of deploy/k8s/, checked without a cluster.

- It is what `ernie-deploy manifests --repository models --kserve` writes (regenerated and compared, like deploy/k8s/).
- The KServe SDK's own deserializer reads it into a V1beta1InferenceService, and serializing that back gives the
  file's object unchanged: a misspelt field would be dropped and a wrong type refused.
- The predictor's pod (its containers, volumes, grace period) passes the Kubernetes schemas shipped in
  kubernetes-validate, strict mode, as the Deployment does.
- Its container is the Deployment's, field for field, but for the three differences KServe needs (the container's
  name, the protocol variable, a CPU limit), so the two files cannot drift apart; the gateway sidecar beside it is the
  Deployment's unchanged.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import kubernetes_validate
import pytest
import yaml

from ernie_deploy.cli import main
from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.deployfiles import kubernetes, manifests
from ernie_deploy.deployfiles.kserve import KSERVE_CONTAINER, KSERVE_FILE, KSERVE_PROTOCOL_ENV, inference_service
from ernie_deploy.deployfiles.options import ManifestOptions
from ernie_deploy.deployfiles.pod import secret_command

from .test_deploy import K8S_VERSIONS, MODELS, ROOT, load_k8s

KSERVE = ROOT / "deploy" / "kserve"
# The predictor's own fields (KServe's ComponentExtensionSpec); everything else in it is a Kubernetes PodSpec.
EXTENSION_FIELDS = ("minReplicas", "maxReplicas", "scaleMetric", "scaleTarget")


def load_isvc() -> dict:
    return yaml.safe_load((KSERVE / KSERVE_FILE).read_text())


# The SDK runs in an interpreter of its own: importing kserve registers its copy of the Open Inference Protocol's
# protobuf messages (inference.ServerLiveRequest, ...) in protobuf's default pool, tritonclient.grpc (imported by the
# rest of the suite) registers the same names, and whichever comes second fails ("duplicate symbol").
# The SDK's models name Kubernetes types (V1ObjectMeta, V1Container, ...) that its generated ApiClient looks up in
# kserve.models alone; they come from the kubernetes package kserve depends on, added to that namespace first.
_SDK_ROUND_TRIP = """
import json, sys
import kserve
import kubernetes.client.models as k8s

for name in dir(k8s):
    if name.startswith("V") and not hasattr(kserve.models, name):
        setattr(kserve.models, name, getattr(k8s, name))
client = kserve.ApiClient()

class Response:  # what ApiClient.deserialize reads: a response whose body is JSON text
    def __init__(self, obj):
        self.data = json.dumps(obj)

results = []
for obj in json.load(sys.stdin):
    try:
        isvc = client.deserialize(Response(obj), "V1beta1InferenceService")
    except (ValueError, TypeError) as error:
        results.append({"error": f"{type(error).__name__}: {error}"})
        continue
    assert isinstance(isvc, kserve.V1beta1InferenceService), type(isvc)
    results.append({"object": client.sanitize_for_serialization(isvc)})
json.dump(results, sys.stdout)
"""


def sdk_round_trips(*objs: dict) -> list:
    """Each object read into kserve.V1beta1InferenceService by the SDK's deserializer and serialized back, or the
    error (a str) the SDK refused it with."""
    proc = subprocess.run(
        [sys.executable, "-c", _SDK_ROUND_TRIP], input=json.dumps(objs), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    return [r.get("object", r.get("error")) for r in json.loads(proc.stdout)]


def predictor_pod(isvc: dict) -> dict:
    """The predictor's PodSpec part as a Pod, for the Kubernetes schemas."""
    pod = {k: v for k, v in isvc["spec"]["predictor"].items() if k not in EXTENSION_FIELDS}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": isvc["metadata"]["name"]}, "spec": pod}


# -- the committed file ---------------------------------------------------------------------------


def test_committed_inferenceservice_is_what_the_generator_writes_for_models(tmp_path):
    written = manifests.write(MODELS, tmp_path, kserve=True)
    assert [p.name for p in written] == [KSERVE_FILE]
    assert sorted(p.name for p in KSERVE.iterdir()) == [KSERVE_FILE]
    assert (KSERVE / KSERVE_FILE).read_text() == written[0].read_text(), (
        "deploy/kserve/inferenceservice.yaml is stale: run "
        "`ernie-deploy manifests --repository models --kserve --out deploy/kserve`"
    )


def test_the_kserve_sdk_reads_the_committed_file_without_dropping_anything():
    isvc = load_isvc()
    assert sdk_round_trips(isvc) == [isvc]


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_the_predictors_pod_passes_the_kubernetes_schemas(version):
    assert kubernetes_validate.validate(predictor_pod(load_isvc()), version, strict=True) == version


def test_the_validation_rejects_a_broken_file():
    """Both checks have teeth: the SDK drops misspelt fields (so the round trip differs) and refuses wrong types and
    missing required fields; the schemas refuse a misspelt pod field."""
    misspelt, misspelt_in_container, wrong_type, no_name = (load_isvc() for _ in range(4))
    misspelt["spec"]["predictor"]["minReplica"] = 2
    misspelt_in_container["spec"]["predictor"]["containers"][0]["imagePullPolicyy"] = "Always"
    wrong_type["spec"]["predictor"]["maxReplicas"] = "four"
    del no_name["spec"]["predictor"]["containers"][0]["name"]
    results = sdk_round_trips(misspelt, misspelt_in_container, wrong_type, no_name)
    assert results[0] != misspelt and "minReplica" not in results[0]["spec"]["predictor"]
    assert results[1] != misspelt_in_container
    assert results[2] == "ValueError: invalid literal for int() with base 10: 'four'"
    assert results[3] == "ValueError: Invalid value for `name`, must not be `None`"
    bad = load_isvc()
    bad["spec"]["predictor"]["volumes"][0]["emptyDir"]["sizeLimt"] = "1Gi"
    with pytest.raises(kubernetes_validate.ValidationError, match="sizeLimt"):
        kubernetes_validate.validate(predictor_pod(bad), K8S_VERSIONS[-1], strict=True)


def test_the_predictor_runs_the_deployments_pod():
    """Same image, command line, env, ports, probes, mounts, resources, volumes and grace period as
    deploy/k8s/deployment.yaml; only what KServe needs differs."""
    isvc = load_isvc()
    predictor = isvc["spec"]["predictor"]
    pod = load_k8s("deployment.yaml")["spec"]["template"]["spec"]
    container, gateway = predictor["containers"]
    expected, expected_gateway = copy.deepcopy(pod["containers"])
    # The gateway sidecar: the Deployment's, unchanged (KServe serves kserve-container and leaves a sidecar as written).
    assert gateway == expected_gateway and gateway["name"] == "gateway"
    assert gateway["readinessProbe"]["httpGet"]["path"] == "/ready"
    expected["name"] = KSERVE_CONTAINER
    expected["env"].append(KSERVE_PROTOCOL_ENV)
    # KServe would otherwise add its default CPU limit (1), below the request.
    expected["resources"]["limits"] = {
        "cpu": expected["resources"]["requests"]["cpu"],
        **expected["resources"]["limits"],
    }
    assert container == expected
    assert predictor["volumes"] == pod["volumes"]
    assert predictor["terminationGracePeriodSeconds"] == pod["terminationGracePeriodSeconds"]
    assert set(predictor) == {*EXTENSION_FIELDS, *pod}, "every pod field is the Deployment's"
    # No storageUri anywhere: the image holds the repository, so KServe adds no storage initializer.
    assert "storageUri" not in json.dumps(isvc) and "STORAGE_URI" not in json.dumps(isvc)
    # KServe's Service sends port 80 to the first container port: HTTP, which its ingress and the probes use.
    assert container["ports"][0] == {"name": "http", "containerPort": 8000, "protocol": "TCP"}
    assert container["readinessProbe"]["httpGet"]["port"] == "http"


def test_kserve_scales_like_the_deployments_autoscaler():
    isvc = load_isvc()
    predictor = isvc["spec"]["predictor"]
    hpa = load_k8s("hpa.yaml")["spec"]
    assert (predictor["minReplicas"], predictor["maxReplicas"]) == (hpa["minReplicas"], hpa["maxReplicas"])
    (metric,) = hpa["metrics"]
    assert predictor["scaleMetric"] == metric["resource"]["name"] == "cpu"
    assert predictor["scaleTarget"] == metric["resource"]["target"]["averageUtilization"]
    # Standard mode with the hpa class: KServe's validator checks scaleMetric cpu as an HPA setting and accepts it.
    assert isvc["metadata"]["annotations"] == {
        "serving.kserve.io/deploymentMode": "Standard",
        "serving.kserve.io/autoscalerClass": "hpa",
    }
    # The Deployment's selector must not match these pods.
    deployment_labels = load_k8s("deployment.yaml")["spec"]["selector"]["matchLabels"]
    assert not deployment_labels.items() <= isvc["metadata"]["labels"].items()


def test_the_header_says_how_to_create_the_secret():
    text = (KSERVE / KSERVE_FILE).read_text()
    assert f"#   {secret_command()}\n" in text
    assert "# /dev/shm: " in text and "Standard mode" in text
    # Where KServe routes, and how the gateway is reached: the command's port name is the gateway container's.
    assert "routes port 80, and its ingress, to Triton's HTTP port (8000)" in text
    command = "kubectl expose deployment ernie-deploy-predictor --name ernie-deploy-gateway --port 8080 --target-port "
    assert f"#   {command}gateway\n" in text
    (gateway,) = [c for c in load_isvc()["spec"]["predictor"]["containers"] if c["name"] == "gateway"]
    assert gateway["ports"][0]["name"] == "gateway" and gateway["ports"][0]["containerPort"] == 8080


# -- options and the command line ---------------------------------------------------------------------


def test_grpc_tls_and_gpus_reach_the_predictor(tmp_path, capsys):
    out = tmp_path / "kserve"
    argv = ["manifests", "-r", str(MODELS), "--kserve", "--out", str(out), "--app-name", "nlp", "--grpc-tls-mutual"]
    assert main([*argv, "--gpus", "1", "--image", "r.example/ernie:2"]) == 2  # the gateway cannot reach TLS gRPC
    assert "fix: add --no-gateway" in capsys.readouterr().err and not out.exists()
    argv.append("--no-gateway")
    assert main([*argv, "--gpus", "1", "--image", "r.example/ernie:2"]) == 0
    assert sorted(p.name for p in out.iterdir()) == [KSERVE_FILE]  # no temporary files left
    printed = capsys.readouterr().out
    assert "kubectl create secret generic nlp-admin-key" in printed and "nlp-grpc-tls" in printed
    isvc = yaml.safe_load((out / KSERVE_FILE).read_text())
    for version in K8S_VERSIONS:
        kubernetes_validate.validate(predictor_pod(isvc), version, strict=True)
    # The SDK reads resource quantities as strings: the GPU count comes back as "1".
    (round_trip,) = sdk_round_trips(isvc)
    round_trip["spec"]["predictor"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 1
    assert round_trip == isvc
    # The same TLS mount and variables as the Deployment written with the same options.
    deployment = kubernetes.manifests(
        MODELS,
        ManifestOptions(
            name="nlp", grpc_tls=True, grpc_tls_mutual=True, gpus=1, image="r.example/ernie:2", gateway=False
        ),
    )["deployment.yaml"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = isvc["spec"]["predictor"]["containers"]
    assert isvc["spec"]["predictor"]["volumes"] == pod["volumes"]
    assert container["volumeMounts"] == pod["containers"][0]["volumeMounts"]
    assert container["env"] == [*pod["containers"][0]["env"], KSERVE_PROTOCOL_ENV]
    assert container["image"] == "r.example/ernie:2"


def test_kserve_names_are_checked_and_the_folders_kept_apart(tmp_path, capsys):
    with pytest.raises(ErnieDeployError, match="cannot name a KServe InferenceService"):
        inference_service(MODELS, ManifestOptions(name="9lives"))
    with pytest.raises(ErnieDeployError, match="KServe adds -predictor"):
        inference_service(MODELS, ManifestOptions(name="a" * 54))
    inference_service(MODELS, ManifestOptions(name="a" * 53))
    # One folder for both would make `kubectl apply -f` start the server twice.
    assert main(["manifests", "-r", str(MODELS), "--out", str(tmp_path)]) == 0
    assert main(["manifests", "-r", str(MODELS), "--kserve", "--out", str(tmp_path)]) == 2
    assert "would run both the Deployment and the InferenceService" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(kubernetes.FILES)
    assert main(["manifests", "-r", str(MODELS), "--kserve", "--out", str(tmp_path / "kserve")]) == 0
    with pytest.raises(ErnieDeployError, match="already holds inferenceservice.yaml"):
        manifests.write(MODELS, tmp_path / "kserve")
