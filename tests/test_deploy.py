"""The container and Kubernetes files, checked without Docker or a cluster.

- docker/Dockerfile is parsed with dockerfile-parse: pinned NGC base image, exec-form CMD equal to the admin-key
  wrapper and server_args("/models"), the arguments the pip launcher runs with (and a real pip server
  runs with exactly them below). The key itself is in neither the image nor the manifests (tests/test_admin_key.py).
- docker/compose.yaml is parsed with PyYAML: shared memory, loopback ports, the key from a secret file, client
  and gateway after a healthy server.
- deploy/k8s/ is what `ernie-deploy manifests --repository models` writes, validated against the Kubernetes
  JSON schemas shipped inside kubernetes-validate (offline), strict mode (unknown fields fail). The pod holds the
  HTTP gateway as a second container, on the Service's gateway port.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from dockerfile_parse import DockerfileParser

from ernie_deploy.cli import build_parser, main
from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.deployfiles import kubernetes, manifests
from ernie_deploy.deployfiles.options import ManifestOptions, memory_bytes
from ernie_deploy.deployfiles.pod import GATEWAY_COMMAND, KEY_WRAPPER, LIVENESS_COMMAND, PORTS
from ernie_deploy.gateway.defaults import DEFAULT_PORT as GATEWAY_PORT
from ernie_deploy.server import preflight
from ernie_deploy.server.args import server_args
from ernie_deploy.server.binary import SYSTEM, TritonBinary
from ernie_deploy.server.preflight import MiB
from ernie_deploy.server.process import TritonServer

from .test_serve import ADD_ONE, write_python_model

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "docker" / "Dockerfile"
COMPOSE = ROOT / "docker" / "compose.yaml"
K8S = ROOT / "deploy" / "k8s"
MODELS = ROOT / "models"
# The oldest and the newest schema sets kubernetes-validate ships: autoscaling/v2 and every field
# used here exist in both.
K8S_VERSIONS = ("1.25", "1.37")


def container_command() -> list[str]:
    """The image's CMD and the Deployment's args: the wrapper that adds the admin key's flags, then the server."""
    return [KEY_WRAPPER, "tritonserver", *server_args("/models")]


def models_need() -> int:
    return preflight.shm_needed(MODELS, gpus=0)


def load_k8s(name: str) -> dict:
    return yaml.safe_load((K8S / name).read_text())


# -- Dockerfile -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dockerfile() -> DockerfileParser:
    return DockerfileParser(path=str(DOCKERFILE))


def test_dockerfile_base_image_is_an_ngc_tritonserver_with_a_pinned_tag(dockerfile):
    assert len(dockerfile.parent_images) == 1, "one stage: the image that serves"
    image = dockerfile.baseimage  # the FROM line with the ARG default substituted
    repo, _, tag = image.rpartition(":")
    assert repo == "nvcr.io/nvidia/tritonserver", image
    assert re.fullmatch(r"\d\d\.\d\d-py3", tag), f"pin a release tag like 24.12-py3, not {tag!r}"
    assert "latest" not in image
    # The comment beside it states the driver that release needs.
    assert re.search(r"driver release \d{3} or later", DOCKERFILE.read_text())


def test_dockerfile_cmd_is_exec_form_and_equals_server_args(dockerfile):
    cmd = [i for i in dockerfile.structure if i["instruction"] == "CMD"]
    assert len(cmd) == 1
    value = cmd[0]["value"].strip()
    assert value.startswith("["), "CMD must be exec form (JSON), so SIGTERM reaches tritonserver, not a shell"
    argv = json.loads(value)
    expected = container_command()
    assert argv == expected, "docker/Dockerfile's CMD should be:\nCMD " + json.dumps(expected)
    entrypoint = [i for i in dockerfile.structure if i["instruction"] == "ENTRYPOINT"]
    assert entrypoint == [], "keep the NGC image's entrypoint; CMD carries the server's arguments"
    # The wrapper is the repository's script, installed under the name CMD calls, executable.
    copied = [i["value"].split() for i in dockerfile.structure if i["instruction"] == "COPY"]
    assert ["docker/restrict-admin-apis.sh", f"/usr/local/bin/{KEY_WRAPPER}"] in copied
    assert f"chmod 0755 /usr/local/bin/{KEY_WRAPPER}" in dockerfile.content
    assert not [i for i in dockerfile.structure if i["instruction"] in ("ENV", "ARG") and "ADMIN_KEY" in i["value"]]


def test_dockerfile_installs_the_package_and_exposes_its_ports(dockerfile):
    runs = " ".join(i["value"] for i in dockerfile.structure if i["instruction"] == "RUN")
    assert "pip install" in runs and "import ernie_deploy.serving.steps" in runs
    assert "ernie-deploy build --repository /models" in runs
    assert " ".join(LIVENESS_COMMAND[:2]) in runs  # the liveness command runs in the image
    # The gateway's server libraries go in with the package's [gateway] extra, pinned at the versions the tests run
    # with, and its app imports in the image.
    import configparser
    from importlib.metadata import version

    assert '".[gateway]"' in runs
    extras = configparser.ConfigParser()
    extras.read(ROOT / "setup.cfg")
    pinned = extras["options.extras_require"]["gateway"]
    for package in ("starlette", "uvicorn", "prometheus_client"):
        assert f"{package}=={version(package)}" in pinned
    assert "import ernie_deploy.gateway.app" in runs
    exposed = {i["value"] for i in dockerfile.structure if i["instruction"] == "EXPOSE"}
    assert exposed == {f"8000 8001 8002 {GATEWAY_PORT}"}
    copied = " ".join(i["value"] for i in dockerfile.structure if i["instruction"] == "COPY")
    for path in ("setup.cfg", "pyproject.toml", "ernie_deploy", "clients"):
        assert path in copied and (ROOT / path).exists()


# -- one command line for the launcher, the image and Kubernetes ----------------------------------


def test_launcher_command_starts_with_server_args(tmp_path):
    binary = TritonBinary(tmp_path / "bin" / "tritonserver", tmp_path / "backends", SYSTEM)
    server = TritonServer(tmp_path / "repo", http_port=1, grpc_port=2, metrics_port=3)
    server.binary = binary
    argv = server.command()
    shared = server_args(server.model_repository)
    assert argv[0] == str(binary.path)
    assert argv[1 : 1 + len(shared)] == shared
    # What the launcher adds on top: its backends, loopback addresses and ports, its region prefix.
    rest = argv[1 + len(shared) :]
    assert f"--backend-directory={binary.backend_dir}" in rest
    assert {"--http-address=127.0.0.1", "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1"} <= set(rest)
    assert "--http-port=1" in rest and "--grpc-port=2" in rest and "--metrics-port=3" in rest
    assert any(a.startswith("--backend-config=python,shm-region-prefix-name=ernie_deploy_") for a in rest)
    # Options reach the shared part, not a second copy of an argument.
    server = TritonServer(tmp_path / "repo", shm_default_byte_size=8 * MiB, shm_growth_byte_size=2 * MiB)
    server.binary = binary
    argv = server.command()
    shared = server_args(server.model_repository, shm_default_byte_size=8 * MiB, shm_growth_byte_size=2 * MiB)
    assert argv[1 : 1 + len(shared)] == shared
    assert len([a for a in argv if "shm-default-byte-size" in a]) == 1


@pytest.mark.integration
def test_the_containers_command_line_serves_on_the_pip_server(tmp_path, dockerfile):
    """The image's CMD, with only the repository path swapped, is what a real pip server starts with."""
    import tritonclient.grpc as grpcclient

    repo = write_python_model(tmp_path / "repo", "add_one", ADD_ONE)
    cmd = json.loads(dockerfile.cmd)
    assert cmd[:2] == [KEY_WRAPPER, "tritonserver"]  # the wrapper's flags: tests/test_admin_key.py
    wanted = [f"--model-repository={repo}" if a == "--model-repository=/models" else a for a in cmd[2:]]
    with TritonServer(repo, http_port=0, grpc_port=0, metrics_port=0, log_file=tmp_path / "triton.log") as server:
        assert server.command()[1 : 1 + len(wanted)] == wanted
        client = grpcclient.InferenceServerClient(url=server.grpc_url)
        try:
            assert client.is_server_ready() and client.is_model_ready("add_one")
        finally:
            client.close()
    log = (tmp_path / "triton.log").read_text()
    assert all(arg in log.splitlines()[0] for arg in wanted)  # the launcher logs the argv it ran


# -- compose ----------------------------------------------------------------------------------------


def compose_bytes(size) -> int:
    """Docker compose's byte values: a number, or a number with b, k, m, g (optionally followed by b)."""
    if isinstance(size, int):
        return size
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([bkmg]?)b?", str(size).strip().lower())
    assert match, f"not a compose size: {size!r}"
    return int(float(match.group(1)) * {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[match.group(2)])


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def test_compose_triton_service(compose):
    triton = compose["services"]["triton"]
    assert (COMPOSE.parent / triton["build"]["context"] / triton["build"]["dockerfile"]).resolve() == DOCKERFILE
    assert compose_bytes(triton["shm_size"]) >= models_need()
    assert compose_bytes(triton["shm_size"]) > 64 * 10**6, "more than Docker's default /dev/shm"
    ports = triton["ports"]
    assert sorted(p.rsplit(":", 1)[1] for p in ports) == ["8000", "8001", "8002"]
    assert all(p.startswith("127.0.0.1:") for p in ports), "publish on the host's loopback only"
    assert "command" not in triton, "the image's CMD (server_args) is the command"
    # The admin key: a secret file from the host, required, read by the image's wrapper; no key in the file.
    (secret,) = triton["secrets"]
    assert triton["environment"]["ERNIE_DEPLOY_ADMIN_KEY_FILE"] == f"/run/secrets/{secret}"
    assert compose["secrets"][secret]["file"].startswith("${ERNIE_DEPLOY_ADMIN_KEY_FILE:?")
    assert "ERNIE_DEPLOY_ADMIN_KEY" not in triton["environment"]
    check = " ".join(triton["healthcheck"]["test"])
    assert "/v2/health/ready" in check and ":8000" in check


def test_compose_client_runs_after_triton_is_healthy(compose):
    client = compose["services"]["client"]
    assert client["depends_on"]["triton"]["condition"] == "service_healthy"
    assert client["image"] == compose["services"]["triton"]["image"]
    command = client["command"]
    assert command[:2] == ["python3", "clients/seq_cls_grpc_client.py"]
    assert command[command.index("--grpc-url") + 1] == "triton:8001"
    assert "ports" not in client


def test_compose_gateway_runs_after_triton_is_healthy_on_loopback(compose):
    gateway, triton = compose["services"]["gateway"], compose["services"]["triton"]
    assert gateway["image"] == triton["image"] and gateway["build"] == triton["build"]  # one image
    assert gateway["depends_on"]["triton"]["condition"] == "service_healthy"
    command = gateway["command"]
    assert command[:2] == ["ernie-deploy", "gateway"]
    args = build_parser().parse_args(command[1:])
    assert (args.repository, args.grpc_url, args.host, args.port) == ("/models", "triton:8001", "0.0.0.0", GATEWAY_PORT)
    assert gateway["ports"] == [f"127.0.0.1:{GATEWAY_PORT}:{GATEWAY_PORT}"], "published on the host's loopback only"
    check = " ".join(gateway["healthcheck"]["test"])
    assert check.startswith("CMD python3 -c") and f"127.0.0.1:{GATEWAY_PORT}/ready" in check
    assert "ProxyHandler({})" in check
    assert "secrets" not in gateway, "the gateway needs no admin key"


def test_compose_size_parser():
    assert compose_bytes("1gb") == 1 << 30 and compose_bytes("256m") == 256 << 20 and compose_bytes(1024) == 1024


# -- Kubernetes ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("name", kubernetes.FILES)
def test_committed_manifests_pass_the_kubernetes_schemas(name, version):
    assert kubernetes_validate.validate(load_k8s(name), version, strict=True) == version


def test_the_validator_rejects_a_wrong_manifest():
    """The schema check has teeth: a misspelt field and a wrong type both fail."""
    bad = load_k8s("deployment.yaml")
    bad["spec"]["template"]["spec"]["volumes"][0]["emptyDir"]["sizeLimt"] = "1Gi"
    with pytest.raises(kubernetes_validate.ValidationError, match="sizeLimt"):
        kubernetes_validate.validate(bad, K8S_VERSIONS[-1], strict=True)
    bad = load_k8s("hpa.yaml")
    bad["spec"]["maxReplicas"] = "four"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSIONS[-1], strict=True)


def test_committed_manifests_are_what_the_generator_writes_for_models(tmp_path):
    written = manifests.write(MODELS, tmp_path)
    assert sorted(p.name for p in written) == sorted(kubernetes.FILES)
    assert sorted(p.name for p in K8S.iterdir()) == sorted(kubernetes.FILES)
    for path in written:
        assert (K8S / path.name).read_text() == path.read_text(), (
            f"deploy/k8s/{path.name} is stale: run `ernie-deploy manifests --repository models --out deploy/k8s`"
        )


def test_deployment_shm_probes_resources_and_command():
    deployment = load_k8s("deployment.yaml")
    pod = deployment["spec"]["template"]["spec"]
    container, _gateway = pod["containers"]
    assert container["name"] == "triton"
    assert container["args"] == container_command()
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/dev/shm"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert mount["mountPath"] == "/dev/shm" and volume["emptyDir"]["medium"] == "Memory"
    size = memory_bytes(volume["emptyDir"]["sizeLimit"])
    assert size >= models_need() > 0
    assert size == preflight.shm_size_for(models_need())
    # tmpfs pages count against the container's memory: the limit holds a full /dev/shm and more.
    assert (
        memory_bytes(container["resources"]["limits"]["memory"])
        > size + memory_bytes(container["resources"]["requests"]["memory"]) // 2
    )
    assert container["resources"]["requests"]["cpu"]  # the HPA's utilization is relative to it
    probes = {k: container[k]["httpGet"]["path"] for k in ("startupProbe", "readinessProbe")}
    assert probes == {"startupProbe": "/v2/health/ready", "readinessProbe": "/v2/health/ready"}
    # Liveness runs the real-request probe (it sees dead python stubs); its command parses as the CLI's.
    liveness = container["livenessProbe"]["exec"]["command"]
    assert liveness[:2] == ["ernie-deploy", "probe"]
    args = build_parser().parse_args(liveness[1:])
    assert args.http_url == f"http://127.0.0.1:{dict(PORTS)['http']}"
    assert args.timeout < container["livenessProbe"]["timeoutSeconds"]  # a stuck call fails the probe itself
    assert container["startupProbe"]["periodSeconds"] * container["startupProbe"]["failureThreshold"] >= 120
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"http": 8000, "grpc": 8001, "metrics": 8002}
    assert "replicas" not in deployment["spec"], "the autoscaler owns the replica count"
    # The admin key comes from the Secret the header comment says how to create; no key value is written.
    (key_volume,) = [v for v in pod["volumes"] if "secret" in v]
    assert key_volume["secret"]["secretName"] == "ernie-deploy-admin-key"
    text = (K8S / "deployment.yaml").read_text()
    assert f"kubectl create secret generic {key_volume['secret']['secretName']}" in text
    assert [e["name"] for e in container["env"]] == ["ERNIE_DEPLOY_ADMIN_KEY_FILE"]  # a path, never the key


def test_service_and_autoscaler_point_at_the_deployment():
    deployment, service, hpa = (load_k8s(n) for n in ("deployment.yaml", "service.yaml", "hpa.yaml"))
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"] == labels == service["spec"]["selector"]
    assert service["spec"]["type"] == "ClusterIP"
    assert {p["name"]: (p["port"], p["targetPort"]) for p in service["spec"]["ports"]} == {
        "http": (8000, "http"),
        "grpc": (8001, "grpc"),
        "metrics": (8002, "metrics"),
        "gateway": (GATEWAY_PORT, "gateway"),
    }
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
    (metric,) = hpa["spec"]["metrics"]
    assert metric["resource"]["name"] == "cpu" and metric["resource"]["target"]["type"] == "Utilization"
    assert 1 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]


def test_the_gateway_is_a_second_container_of_the_pod():
    """Same image and /models as Triton, Triton on the pod's loopback, its own port, resources and probes."""
    from ernie_deploy.deployfiles import pod as pod_module

    assert pod_module.GATEWAY_PORT == GATEWAY_PORT, "the manifests' gateway port is the gateway's default"
    pod = load_k8s("deployment.yaml")["spec"]["template"]["spec"]
    triton, gateway = pod["containers"]
    assert gateway["name"] == "gateway" and gateway["image"] == triton["image"]
    # The command parses as the CLI's and calls Triton's gRPC inside the pod, on the repository baked in the image.
    assert gateway["args"] == GATEWAY_COMMAND and gateway["args"][:2] == ["ernie-deploy", "gateway"]
    args = build_parser().parse_args(gateway["args"][1:])
    assert args.grpc_url == f"127.0.0.1:{dict(PORTS)['grpc']}" and args.repository == "/models"
    assert (args.host, args.port) == ("0.0.0.0", GATEWAY_PORT)  # the kubelet and the Service reach it on the pod IP
    assert args.tls_ca is None  # plain gRPC on loopback: no TLS hop
    assert gateway["ports"] == [{"name": "gateway", "containerPort": GATEWAY_PORT, "protocol": "TCP"}]
    assert {p["containerPort"] for p in gateway["ports"]}.isdisjoint(p["containerPort"] for p in triton["ports"])
    assert gateway["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "gateway"}
    assert gateway["livenessProbe"]["httpGet"] == {"path": "/health", "port": "gateway"}
    resources = gateway["resources"]
    assert memory_bytes(resources["limits"]["memory"]) >= memory_bytes(resources["requests"]["memory"]) > 0
    assert resources["requests"]["cpu"]  # counted in the pod's CPU request, which the autoscaler's target is of
    # Neither the admin key nor /dev/shm: it only infers and asks readiness.
    assert "env" not in gateway and "volumeMounts" not in gateway
    text = (K8S / "deployment.yaml").read_text()
    assert "# The gateway container" in text and f"port gateway ({GATEWAY_PORT})" in text


def test_the_gateway_switch_and_its_options(tmp_path, capsys):
    out = tmp_path / "k8s"
    argv = ["manifests", "-r", str(MODELS), "--out", str(out), "--no-gateway"]
    assert main([*argv, "--gateway-cpu", "1"]) == 0
    capsys.readouterr()
    pod = yaml.safe_load((out / "deployment.yaml").read_text())["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["triton"]
    service = yaml.safe_load((out / "service.yaml").read_text())
    assert [p["name"] for p in service["spec"]["ports"]] == ["http", "grpc", "metrics"]
    assert "gateway" not in (out / "deployment.yaml").read_text()
    # Its resources are options, checked.
    objects = kubernetes.manifests(MODELS, ManifestOptions(gateway_cpu="2", gateway_memory_limit="2Gi"))
    _, gateway = objects["deployment.yaml"]["spec"]["template"]["spec"]["containers"]
    assert gateway["resources"] == {"requests": {"cpu": "2", "memory": "256Mi"}, "limits": {"memory": "2Gi"}}
    for obj in objects.values():
        kubernetes_validate.validate(obj, K8S_VERSIONS[-1], strict=True)
    for options, message in (
        (["--gateway-cpu", "lots"], "--gateway-cpu 'lots' is not a Kubernetes CPU quantity"),
        (["--gateway-memory", "2Gi", "--gateway-memory-limit", "1Gi"], "--gateway-memory-limit 1Gi is under"),
        (["--gateway-memory", "much"], "--gateway-memory 'much' is not a Kubernetes memory quantity"),
    ):
        assert main(["manifests", "-r", str(MODELS), "--out", str(tmp_path / "bad"), *options]) == 2
        err = capsys.readouterr().err
        assert message in err and "fix:" in err, err
    assert not (tmp_path / "bad").exists()


def test_the_gateway_is_refused_with_grpc_tls_and_says_why(tmp_path, capsys):
    for flag in ("--grpc-tls", "--grpc-tls-mutual"):
        assert main(["manifests", "-r", str(MODELS), "--out", str(tmp_path / "k8s"), flag]) == 2
        err = capsys.readouterr().err
        assert "reaches Triton on 127.0.0.1" in err and "not 127.0.0.1" in err and "fix: add --no-gateway" in err
    assert not (tmp_path / "k8s").exists()  # refused before anything is written


def test_shm_limit_follows_the_repository_and_options(tmp_path):
    repo = write_python_model(tmp_path / "repo", "busy", ADD_ONE, count=80)
    need = preflight.shm_needed(repo, gpus=0)
    assert need == 80 * 5 * MiB
    objects = kubernetes.manifests(repo, ManifestOptions(memory_limit="8Gi", gpus=1, image="registry.example/e:1"))
    pod = objects["deployment.yaml"]["spec"]["template"]["spec"]
    assert memory_bytes(pod["volumes"][0]["emptyDir"]["sizeLimit"]) == 832 * MiB  # 2 x 400 MiB in 64 MiB steps
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert pod["containers"][0]["image"] == "registry.example/e:1"
    for obj in objects.values():
        kubernetes_validate.validate(obj, K8S_VERSIONS[-1], strict=True)
    # A bigger region per instance raises both the server's argument and the volume.
    objects = kubernetes.manifests(repo, ManifestOptions(memory_limit="8Gi", shm_default_byte_size=8 * MiB))
    container = objects["deployment.yaml"]["spec"]["template"]["spec"]["containers"][0]
    assert "--backend-config=python,shm-default-byte-size=8388608" in container["args"]
    # A limit that cannot hold /dev/shm is refused with the fix.
    with pytest.raises(ErnieDeployError, match="--memory-limit 1Gi leaves too little room") as err:
        kubernetes.manifests(repo, ManifestOptions(memory="512Mi", memory_limit="1Gi"))
    assert "raise --memory-limit" in str(err.value)


def test_cli_writes_the_manifests_and_reports_bad_input(tmp_path, capsys):
    out = tmp_path / "k8s"
    image = ["--image", "r.example/ernie:2"]
    assert main(["manifests", "-r", str(MODELS), "--out", str(out), *image, "--app-name", "nlp"]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(kubernetes.FILES)  # no temporary files left
    assert "image: r.example/ernie:2" in (out / "deployment.yaml").read_text()
    # It says how to create the Secret the pods mount, named after --name.
    assert "kubectl create secret generic nlp-admin-key --from-file=admin-key=/dev/stdin" in capsys.readouterr().out
    assert main(["manifests", "-r", str(tmp_path / "nothing"), "--out", str(out)]) == 2
    assert "is not a model repository" in capsys.readouterr().err
    assert main(["manifests", "-r", str(MODELS), "--out", str(out), "--memory-limit", "lots"]) == 2
    assert "not a Kubernetes memory quantity" in capsys.readouterr().err
    assert main(["manifests", "-r", str(MODELS), "--out", str(out), "--min-replicas", "5", "--max-replicas", "2"]) == 2


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_grpc_tls_manifests_pass_the_kubernetes_schemas(tmp_path, capsys, version):
    """`manifests --grpc-tls-mutual`: the TLS Secret's mount and variables are valid Kubernetes (what they mean:
    tests/test_tls.py), and the command says how to create that Secret."""
    out = tmp_path / "k8s"
    argv = ["manifests", "-r", str(MODELS), "--out", str(out), "--app-name", "nlp", "--grpc-tls-mutual", "--no-gateway"]
    assert main(argv) == 0
    assert "kubectl create secret generic nlp-grpc-tls --type=kubernetes.io/tls" in capsys.readouterr().out
    for name in kubernetes.FILES:
        assert kubernetes_validate.validate(yaml.safe_load((out / name).read_text()), version, strict=True) == version
    (volume,) = [
        v
        for v in yaml.safe_load((out / "deployment.yaml").read_text())["spec"]["template"]["spec"]["volumes"]
        if v["name"] == "grpc-tls"
    ]
    assert volume["secret"]["secretName"] == "nlp-grpc-tls"
