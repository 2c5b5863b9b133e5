"""The monitoring files in deploy/prometheus/, checked with Debian's Prometheus 2.42 and its promtool: the scrape
configs and rules parse, each alert fires on the series that should fire it and stays quiet otherwise, the drift
rules are their generator's output (deployfiles/drift_rules.py), and a real Prometheus scraping the real server sees
every served model and version, with the names and labels the rules use (tests/test_drift_served.py fires the drift
alerts on the real server).

`scripts/test.sh` fetches Prometheus first (`scripts/install_prometheus.sh`); run on their own, these tests skip
with that fix when it is missing. Starting Prometheus is kept here: it is test plumbing, nothing in the package
runs it (operators run their own with the shipped files).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from ernie_deploy.core import profile
from ernie_deploy.core.paths import cache_dir
from ernie_deploy.deployfiles import drift_rules
from ernie_deploy.server.preflight import free_ports

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy" / "prometheus"
# Local servers only: a proxy in the environment must not route these requests.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    unpacked = cache_dir() / "tools" / "prometheus" / "usr" / "bin" / name
    if os.access(unpacked, os.X_OK):
        return str(unpacked)
    pytest.skip(f"{name} is not installed: run `bash scripts/install_prometheus.sh` (scripts/test.sh does)")


def _promtool(*args: str, cwd: Path = DEPLOY) -> str:
    result = subprocess.run([_tool("promtool"), *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    return output


def _alert_names(file: str = "alerts.yml") -> list[str]:
    rules = yaml.safe_load((DEPLOY / file).read_text())
    return [rule["alert"] for group in rules["groups"] for rule in group["rules"] if "alert" in rule]


def _fired(test_file: str) -> set[str]:
    """The alerts a promtool unit-test file has a case expecting to fire."""
    cases = yaml.safe_load((DEPLOY / test_file).read_text())["tests"]
    return {check["alertname"] for case in cases for check in case["alert_rule_test"] if check.get("exp_alerts")}


def test_shipped_config_and_rules_pass_promtool_check():
    checked = _promtool("check", "config", "prometheus.yml")
    assert "SUCCESS: 2 rule files found" in checked and "SUCCESS: 9 rules found" in checked
    assert f"SUCCESS: {len(_alert_names())} rules found" in _promtool("check", "rules", "alerts.yml")
    assert len(_alert_names()) == 7
    drift = yaml.safe_load((DEPLOY / "drift.yml").read_text())
    count = sum(len(group["rules"]) for group in drift["groups"])
    assert f"SUCCESS: {count} rules found" in _promtool("check", "rules", "drift.yml")
    assert _alert_names("drift.yml") == [
        "ErnieDeployAnswerDrift",
        "ErnieDeployConfidenceCollapse",
        "ErnieDeployTextLengthShift",
    ]


def test_alert_rule_unit_tests_pass_and_make_every_alert_fire():
    assert "SUCCESS" in _promtool("test", "rules", "alerts_test.yml")
    # An alert without a case that expects it to fire would pass promtool while proving nothing.
    fired = _fired("alerts_test.yml")
    assert set(_alert_names()) <= fired, f"alerts never shown firing: {set(_alert_names()) - fired}"


def test_alert_rule_unit_tests_fail_when_a_threshold_moves(tmp_path):
    """The unit tests can fail: with the queue threshold out of reach, the case expecting TritonQueueTimeHigh fails."""
    rules = (DEPLOY / "alerts.yml").read_text()
    moved = re.sub(r"/ 1000\n(\s+)> \d+", r"/ 1000\n\1> 1000", rules)
    assert moved != rules
    (tmp_path / "alerts.yml").write_text(moved)
    shutil.copy(DEPLOY / "alerts_test.yml", tmp_path)
    result = subprocess.run(
        [_tool("promtool"), "test", "rules", "alerts_test.yml"], cwd=tmp_path, capture_output=True, text=True
    )
    assert result.returncode != 0
    assert "TritonQueueTimeHigh" in result.stdout + result.stderr


def test_drift_rule_unit_tests_pass_and_make_every_drift_alert_fire():
    assert "SUCCESS" in _promtool("test", "rules", "drift_test.yml")
    fired = _fired("drift_test.yml")
    assert set(_alert_names("drift.yml")) <= fired, (
        f"alerts never shown firing: {set(_alert_names('drift.yml')) - fired}"
    )
    # Each alert also has a check that it stays quiet (the stream matching its reference, too few texts).
    cases = yaml.safe_load((DEPLOY / "drift_test.yml").read_text())["tests"]
    quiet = {c["alertname"] for case in cases for c in case["alert_rule_test"] if c.get("exp_alerts") == []}
    assert set(_alert_names("drift.yml")) <= quiet


def test_the_shipped_drift_rules_are_the_generators_output():
    assert (DEPLOY / "drift.yml").read_text(encoding="utf-8") == drift_rules.render(), (
        "deploy/prometheus/drift.yml is out of date or edited by hand: "
        "run `python -m ernie_deploy.deployfiles.drift_rules`"
    )
    shipped = yaml.safe_load((DEPLOY / "drift.yml").read_text())
    assert shipped == drift_rules.drift_rules()
    recorded = [rule.get("record") for group in shipped["groups"] for rule in group["rules"]]
    assert {"ernie_deploy:profile_share:30m", "ernie_deploy:drift_js:30m", "ernie_deploy:texts:30m"} <= set(recorded)
    # The rules read the series the serving side exports, by the names it uses.
    text = (DEPLOY / "drift.yml").read_text()
    for metric in (profile.PROFILE_METRIC, profile.TEXTS_METRIC, profile.REFERENCE_METRIC):
        assert metric in text
    # Another window renames the recorded series, so a dashboard or rule on one window never reads another's.
    short = drift_rules.drift_rules(window="30s", alert_for="0s", min_texts=50)
    assert "ernie_deploy:drift_js:30s" in str(short) and "30m" not in str(short) and ">= 50" in str(short)


def test_every_drift_alert_points_at_its_runbook_section():
    operations = (ROOT / "docs" / "OPERATIONS.md").read_text(encoding="utf-8")
    rules = yaml.safe_load((DEPLOY / "drift.yml").read_text())
    for rule in (r for g in rules["groups"] for r in g["rules"] if "alert" in r):
        page, anchor = rule["annotations"]["runbook"].split("#")
        assert page == "docs/OPERATIONS.md" and f'<a id="{anchor}"></a>' in operations, rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


def test_the_drift_writer_refuses_bad_options_and_writes_its_options(tmp_path, capsys):
    from ernie_deploy.core.errors import BadOptionsError

    for bad, message in (
        ({"window": "half an hour"}, "--window"),
        ({"alert_for": "10"}, "--for"),
        ({"min_texts": 0}, "--min-texts"),
    ):
        with pytest.raises(BadOptionsError, match=message):
            drift_rules.drift_rules(**bad)
    out = tmp_path / "rules" / "drift.yml"
    assert drift_rules.main(["--out", str(out), "--window", "2h", "--for", "20m", "--min-texts", "500"]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    assert yaml.safe_load(out.read_text()) == drift_rules.drift_rules("2h", "20m", 500)
    assert "SUCCESS: 9 rules found" in _promtool("check", "rules", str(out))


@pytest.mark.parametrize(
    ("moved", "alert"),
    [
        ({"answer_js": 0.9}, "ErnieDeployAnswerDrift"),
        ({"low_confidence_rise": 0.5}, "ErnieDeployConfidenceCollapse"),
        ({"chars_js": 0.9}, "ErnieDeployTextLengthShift"),
        ({"min_texts": 1000}, "ErnieDeployAnswerDrift"),
    ],
)
def test_drift_rule_unit_tests_fail_when_a_threshold_moves(tmp_path, moved, alert):
    """The unit tests can fail: with a threshold out of reach, the case expecting that alert fails."""
    rules = drift_rules.drift_rules(**moved)
    assert rules != drift_rules.drift_rules()
    (tmp_path / "drift.yml").write_text(yaml.safe_dump(rules))
    shutil.copy(DEPLOY / "drift_test.yml", tmp_path)
    result = subprocess.run(
        [_tool("promtool"), "test", "rules", "drift_test.yml"], cwd=tmp_path, capture_output=True, text=True
    )
    assert result.returncode != 0
    assert alert in result.stdout + result.stderr


def test_kubernetes_variant_matches_the_manifests_and_the_local_config(tmp_path):
    """Debian builds Prometheus without Kubernetes discovery, so promtool here refuses `kubernetes_sd_configs`;
    the rest of the file is checked with a static target in its place, and its selector against deploy/k8s/ and
    deploy/kserve/."""
    k8s = yaml.safe_load((DEPLOY / "prometheus-kubernetes.yml").read_text())
    local = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    assert k8s["rule_files"] == local["rule_files"]
    # The local config's jobs, and in the cluster the gateway sidecar's too (locally it is scraped where it runs).
    jobs = [j["job_name"] for j in k8s["scrape_configs"]]
    assert jobs == [j["job_name"] for j in local["scrape_configs"]] + ["gateway"]
    job = k8s["scrape_configs"][0]
    gateway = k8s["scrape_configs"][1]

    deployment = yaml.safe_load((ROOT / "deploy" / "k8s" / "deployment.yaml").read_text())
    pod = deployment["spec"]["template"]
    # KServe gives the predictor's pods the InferenceService's labels.
    isvc = yaml.safe_load((ROOT / "deploy" / "kserve" / "inferenceservice.yaml").read_text())
    wanted = dict(pair.split("=") for pair in job["kubernetes_sd_configs"][0]["selectors"][0]["label"].split(","))
    keep_port = next(r for r in job["relabel_configs"] if "__meta_kubernetes_pod_container_port_name" in str(r))
    components = set()
    for labels, containers in (
        (pod["metadata"]["labels"], pod["spec"]["containers"]),
        (isvc["metadata"]["labels"], isvc["spec"]["predictor"]["containers"]),
    ):
        assert wanted.items() <= labels.items()
        components.add(labels["app.kubernetes.io/component"])
        ports = {p["name"]: p["containerPort"] for c in containers for p in c["ports"]}
        assert keep_port["regex"] in ports and ports[keep_port["regex"]] == 8002
        gateway_port = next(
            r for r in gateway["relabel_configs"] if "__meta_kubernetes_pod_container_port_name" in str(r)
        )
        assert ports[gateway_port["regex"]] == 8080, "the gateway sidecar's port, scraped for its own series"
    assert components == {"triton-server", "kserve-predictor"}  # told apart by the `component` label
    assert {
        "source_labels": ["__meta_kubernetes_pod_label_app_kubernetes_io_component"],
        "target_label": "component",
    } in job["relabel_configs"]

    for one, target in ((job, "127.0.0.1:8002"), (gateway, "127.0.0.1:8080")):
        del one["kubernetes_sd_configs"]
        one["static_configs"] = [{"targets": [target]}]
    k8s["rule_files"] = [str(DEPLOY / name) for name in k8s["rule_files"]]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(k8s))
    assert "SUCCESS" in _promtool("check", "config", "prometheus.yml", cwd=tmp_path)


# -- a real Prometheus on the real server ----------------------------------------------------------------------


def _get(url: str, headers: dict | None = None, body: dict | None = None, timeout: float = 10.0):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={**(headers or {}), "Content-Type": "application/json"})
    with _OPENER.open(req, timeout=timeout) as resp:
        return json.loads(resp.read() or b"null")


class _Prometheus:
    """A Prometheus process on 127.0.0.1 with the shipped config, its target and intervals replaced."""

    def __init__(self, work: Path, target: str, interval: str = "1s", rule_files: list[Path] | None = None):
        """rule_files: the rules it loads (default: those of the shipped config, beside it)."""
        config = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
        config["global"].update(scrape_interval=interval, evaluation_interval=interval)
        shipped = [DEPLOY / name for name in config["rule_files"]]
        config["rule_files"] = [str(path) for path in (shipped if rule_files is None else rule_files)]
        config["scrape_configs"][0]["static_configs"] = [{"targets": [target]}]
        (work / "prometheus.yml").write_text(yaml.safe_dump(config))
        (port,) = free_ports(1)
        self.url = f"http://127.0.0.1:{port}"
        self.log = work / "prometheus.log"
        argv = [
            _tool("prometheus"),
            f"--config.file={work / 'prometheus.yml'}",
            f"--storage.tsdb.path={work / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ]
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"prometheus exited: {self.log.read_text()[-2000:]}"
            try:
                with _OPENER.open(f"{self.url}/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"prometheus not ready after {timeout} s: {self.log.read_text()[-2000:]}")

    def query(self, promql: str) -> list[dict]:
        answer = _get(f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}")
        assert answer["status"] == "success", answer
        return answer["data"]["result"]

    def api(self, path: str):
        answer = _get(f"{self.url}/api/v1/{path}")
        assert answer["status"] == "success", answer
        return answer["data"]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _served_models(server) -> set[tuple[str, str]]:
    """(model, version) of every ready model, from the server's repository index."""
    key = getattr(server, "admin_key", None)
    index = _get(f"{server.http_url}/v2/repository/index", key.headers() if key else None, body={"ready": True})
    return {(entry["name"], entry["version"]) for entry in index if entry.get("state") == "READY"}


def _wait_for(check, timeout: float = 30.0, interval: float = 0.5):
    """Poll `check()` until it returns a falsy 'what is missing', and return the last answer."""
    deadline = time.monotonic() + timeout
    while True:
        missing = check()
        if not missing or time.monotonic() > deadline:
            return missing
        time.sleep(interval)


@pytest.mark.integration
def test_real_prometheus_sees_every_served_model_and_version(server, tmp_path):
    from ernie_deploy.client.grpc_client import Client
    from ernie_deploy.core.tasks import DEMO_MODELS, SEQ_CLS, TOKEN_CLS

    served = _served_models(server)
    ensembles = {DEMO_MODELS[SEQ_CLS.name], DEMO_MODELS[TOKEN_CLS.name]}
    assert ensembles <= {name for name, _ in served}
    assert len(served) >= 2, served  # one python model per task in the default layout (fused)

    prom = _Prometheus(tmp_path, server.metrics_url.split("//")[1].split("/")[0])
    try:
        prom.wait_ready()
        sent = 5
        for task, text in (
            (SEQ_CLS, "国足公布世预赛名单"),
            (TOKEN_CLS, "国务院总理李鹏今天在人民大会堂会见了日本客人"),
        ):
            with Client(task, server.grpc_url) as client:
                for _ in range(sent):
                    client.infer([text])

        def target_not_up() -> bool:
            up = prom.query('up{job="triton"}')
            return len(up) != 1 or up[0]["value"][1] != "1"

        assert not _wait_for(target_not_up), prom.query("up")
        wanted = ("nv_inference_request_success", "nv_inference_queue_duration_us", "nv_inference_request_failure")

        def missing() -> set:
            found = {
                (r["metric"]["__name__"], r["metric"]["model"], r["metric"]["version"])
                for r in prom.query(f'{{job="triton", __name__=~"{"|".join(wanted)}"}}')
            }
            return {(name, m, v) for name in wanted for m, v in served} - found

        absent = _wait_for(missing)
        assert not absent, f"metrics missing from Prometheus: {sorted(absent)}"

        # Counters only grow, and other tests may have used this server first: at least what was sent here.
        def behind() -> list:
            counts = {r["metric"]["model"]: float(r["value"][1]) for r in prom.query("nv_inference_request_success")}
            return [m for m in ensembles if counts.get(m, 0) < sent]

        assert not _wait_for(behind)

        # The names and labels the rules and their unit tests rely on are the ones this server exports.
        rules = yaml.safe_load((DEPLOY / "alerts.yml").read_text())
        used = {n for g in rules["groups"] for r in g["rules"] for n in re.findall(r"\bnv_\w+", r["expr"])}
        test_series = [
            re.fullmatch(r"(\w+)\{(.*)\}", series["series"]).groups()
            for case in yaml.safe_load((DEPLOY / "alerts_test.yml").read_text())["tests"]
            for series in case["input_series"]
        ]
        tested = {name for name, _ in test_series if name != "up"}
        assert used <= tested, f"alerts on metrics their unit tests never feed: {used - tested}"
        exported = set(prom.api("label/__name__/values"))
        assert tested <= exported, f"not exported by Triton: {tested - exported}"
        reasons = set(prom.api("label/reason/values"))
        assert {"BACKEND", "OTHER", "REJECTED", "CANCELED"} <= reasons, reasons
        for name, labels in test_series:
            real = prom.api(f"series?{urllib.parse.urlencode({'match[]': name})}")
            assert real, name
            pairs = dict(re.findall(r'(\w+)="([^"]*)"', labels))
            assert set(pairs) == set(real[0]) - {"__name__"}, (name, labels, real[0])
            if "reason" in pairs:
                assert pairs["reason"] in reasons, labels

        # Every rule evaluates on real data, and the alerts that mean "broken" are quiet on this healthy server.
        def unhealthy() -> list:
            rules = {r["name"]: r["health"] for g in prom.api("rules")["groups"] for r in g["rules"]}
            return [name for name in _alert_names() + _alert_names("drift.yml") if rules.get(name) != "ok"]

        assert not _wait_for(unhealthy), prom.api("rules")
        active = {a["labels"]["alertname"] for a in prom.api("alerts")["alerts"]}
        assert not active & {"TritonDown", "TritonModelGone", "TritonNoModels"}, active
    finally:
        prom.stop()
