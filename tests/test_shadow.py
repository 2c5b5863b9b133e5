"""`rollout --shadow` on a real server: the serving version mirrors its requests to the candidate, the agreement
measured on /metrics is the offline one, --min-agreement decides, a dead candidate costs no client anything, and no
config keeps the shadow afterwards."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from ernie_deploy.core.errors import BadOptionsError, ErnieDeployError
from ernie_deploy.core.shadow import SHADOW_METRIC, SHADOW_PARAMETER
from ernie_deploy.core.tasks import SEQ_CLS, TOKENIZER_STEP
from ernie_deploy.repository.add_version import build_version
from ernie_deploy.repository.build import BuildOptions, build
from ernie_deploy.repository.versions import VersionedModel
from tests.conftest import artifacts

ENSEMBLE = BuildOptions(runtime="python", layout="ensemble")


# A version 2 that answers differently on a known share of texts -------------------------------------------------
def logits_bias(model) -> str:
    """The name of the initializer added last on the way to the logits: the classifier's output bias."""
    producers = {out: node for node in model.graph.node for out in node.output}
    initializers = {i.name for i in model.graph.initializer}
    node = producers["logits"]
    while node.op_type == "Identity":
        node = producers[node.input[0]]
    assert node.op_type == "Add", node.op_type
    (bias,) = [name for name in node.input if name in initializers]
    return bias


def shifted(onnx_path: Path, out: Path, label: int, delta: float) -> Path:
    """model.onnx with `delta` added to class `label`'s output bias: that class wins more often."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(onnx_path))
    name = logits_bias(model)
    for i, init in enumerate(model.graph.initializer):
        if init.name == name:
            bias = numpy_helper.to_array(init).copy()
            bias[label] += delta
            model.graph.initializer[i].CopyFrom(numpy_helper.from_array(bias, name))
    out.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(out))
    return out


def served_logits(repo: Path, name: str, onnx_path: Path, texts: list[str]) -> np.ndarray:
    """The logits `onnx_path` gives `texts` read the way served model `name` reads them (its own tokenizer file and
    max_seq_len, the serving code's encoder)."""
    from ernie_deploy.repository.served import served_model
    from ernie_deploy.serving.encoding import encode_items
    from ernie_deploy.serving.runtime import OnnxModel
    from ernie_deploy.serving.tokenizer import load_tokenizer

    record = served_model(repo, name)
    model = VersionedModel.read(repo, name)
    shared = model.entry.ensemble_scheduling.step[0].model_name if model.layout.shares_tokenizer else TOKENIZER_STEP
    tokenizer_json = repo / model.layout.homes(record, shared)["tokenizer"] / "1" / "tokenizer.json"
    tokenizer = load_tokenizer(tokenizer_json)
    enc = encode_items(tokenizer, texts, record.max_seq_len)
    return np.asarray(OnnxModel(onnx_path)(enc.input_ids, enc.token_type_ids))


def flipping_version(onnx_path: Path, logits: np.ndarray, out: Path, share: float) -> Path:
    """A copy of `onnx_path` whose answers move to one class on about `share` of the texts `logits` are of: that
    class's bias raised past the margin of that share of the texts that answer another class."""
    winners = logits.argmax(axis=1)
    label = int(np.bincount(winners, minlength=logits.shape[1]).argmin())  # the class answered least
    margins = np.sort((logits.max(axis=1) - logits[:, label])[winners != label])
    k = int(share * len(logits))
    delta = float(margins[k - 1] + margins[k]) / 2  # between two texts' margins: the first k of them flip
    return shifted(onnx_path, out, label, delta)


def test_trial_version_flips_a_known_share(tiny_pipeline, tmp_path):
    """The helper the tests rest on: the shifted version disagrees with the first on about the share asked for."""
    repo = tmp_path / "models"
    build(artifacts(tiny_pipeline, "news"), repo, ENSEMBLE)
    texts = [f"新闻 {i} 股市 {i % 7} 体育" * (1 + i % 3) for i in range(200)]
    v1 = served_logits(repo, "news", tiny_pipeline.onnx, texts)
    v2 = served_logits(repo, "news", flipping_version(tiny_pipeline.onnx, v1, tmp_path / "v2.onnx", 0.2), texts)
    disagree = float(np.mean(v1.argmax(1) != v2.argmax(1)))
    assert 0.1 <= disagree <= 0.3, disagree


# Running a shadow beside traffic -------------------------------------------------------------------------------------
class Traffic:
    """Clients sending `texts` to served model `record` from `concurrency` threads: once each (`loop` False) or
    round and round until stopped. Every answer and every failure is kept."""

    def __init__(self, url: str, record, texts: list[str], concurrency: int = 4, loop: bool = False):
        self.url, self.record, self.texts, self.loop = url, record, texts, loop
        self.answers: list[tuple[int, object]] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.threads = [
            threading.Thread(target=self._run, args=(k, concurrency), daemon=True) for k in range(concurrency)
        ]

    def _run(self, k: int, n: int) -> None:
        from ernie_deploy.client.grpc_client import NO_RETRY, Client, decode_outputs

        task = self.record.task_spec
        with Client(task, self.url, model=self.record, retry=NO_RETRY) as client:
            i = k
            while not self.stop.is_set():
                if i >= len(self.texts):
                    if not self.loop:
                        return
                    i %= len(self.texts)
                try:
                    answer = decode_outputs(task, client.infer([self.texts[i]]))[0]
                    with self.lock:
                        self.answers.append((i, answer))
                except Exception as exc:  # noqa: BLE001 - every failure is a finding
                    with self.lock:
                        self.errors.append(str(exc)[:300])
                i += n

    def start(self) -> Traffic:
        for thread in self.threads:
            thread.start()
        return self

    def join(self) -> None:
        """Wait for the clients: those sending each text once finish on their own, looping ones are stopped."""
        if self.loop:
            self.stop.set()
        for thread in self.threads:
            thread.join(timeout=60)


def run_shadow(server, repo: Path, name: str, texts: list[str], *, loop=False, during=None, **options):
    """`shadow_rollout` of `name` to version 2 in a thread; traffic starts once the shadow is on (its log line says
    so). Returns (report or the error raised, traffic, log lines)."""
    from ernie_deploy.client.admin import RepositoryAdmin
    from ernie_deploy.operate.rollout import canary_probe
    from ernie_deploy.operate.shadow import shadow_rollout
    from ernie_deploy.repository.served import served_model

    record = served_model(repo, name)
    on = threading.Event()
    lines: list[str] = []

    def log(line: str) -> None:
        lines.append(line)
        if "shadow on" in line:
            on.set()

    outcome: dict = {}

    def shadow() -> None:
        try:
            with RepositoryAdmin(server.grpc_url) as admin:
                outcome["result"] = shadow_rollout(
                    repo,
                    name,
                    2,
                    admin,
                    canary_probe(server.grpc_url),
                    metrics_url=server.metrics_url,
                    log=log,
                    **options,
                )
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome["result"] = exc

    thread = threading.Thread(target=shadow, daemon=True)
    thread.start()
    assert on.wait(120) or not thread.is_alive(), lines
    if "result" in outcome:
        return outcome["result"], None, lines
    traffic = Traffic(server.grpc_url, record, texts, loop=loop).start()
    if during is not None:
        during()
    thread.join(timeout=300)
    traffic.join()
    assert not thread.is_alive(), lines
    return outcome["result"], traffic, lines


def no_shadow_in(repo: Path) -> None:
    from ernie_deploy.repository.configs import parse

    for path in repo.rglob("config.pbtxt"):
        assert SHADOW_PARAMETER not in parse(path.read_text(encoding="utf-8")).parameters, path


def answers_of(repo: Path, name: str, version: int, texts: list[str]) -> list:
    from ernie_deploy.reliability.rollout_soak import version_predictions

    return version_predictions(repo, name, version, texts)


def server_for(repo: Path, log: Path):
    from ernie_deploy.server.process import TritonServer

    return TritonServer(repo, http_port=0, grpc_port=0, metrics_port=0, log_file=log)


def needs_the_serving_side(server) -> None:
    from ernie_deploy.client.metrics import scrape

    if not any(s.name == SHADOW_METRIC for s in scrape(server.metrics_url)):
        pytest.fail(f"the server exports no {SHADOW_METRIC} during a shadow; log:\n{server.log_text()[-3000:]}")


# The agreement, measured and decided on ------------------------------------------------------------------------------
@pytest.mark.integration
def test_the_shadow_measures_the_offline_agreement_and_min_agreement_decides(seq_cls_pipeline, tmp_path):
    from ernie_deploy.fetch.data import read_split_file, split_file
    from ernie_deploy.operate.shadow import ShadowReport

    repo = tmp_path / "models"
    name = "news"
    build(artifacts(seq_cls_pipeline, name), repo, ENSEMBLE)
    texts, _ = read_split_file(split_file(seq_cls_pipeline.data, "test", SEQ_CLS.split_format))
    texts = list(texts[:300])
    v1_logits = served_logits(repo, name, seq_cls_pipeline.onnx, texts)
    v2_onnx = flipping_version(seq_cls_pipeline.onnx, v1_logits, tmp_path / "v2" / "model.onnx", 0.2)
    build_version(artifacts(seq_cls_pipeline, name, onnx=v2_onnx), repo, ENSEMBLE, version=2)
    # Offline: both versions' own files, through the serving code, on the same texts.
    v1, v2 = (answers_of(repo, name, v, texts) for v in (1, 2))
    offline = sum(a == b for a, b in zip(v1, v2)) / len(texts)
    assert 0.7 <= offline <= 0.9, offline
    with server_for(repo, tmp_path / "server.log") as server:
        # Above the agreement the shadow measures: refused, version 1 keeps serving, nothing left of the shadow.
        refused, traffic, lines = run_shadow(
            server, repo, name, texts, fraction=1.0, requests=len(texts), duration_s=120, min_agreement=offline + 0.03
        )
        needs_the_serving_side(server)
        assert isinstance(refused, ErnieDeployError), (refused, lines)
        assert "below --min-agreement" in refused.problem and " -> " in refused.problem, refused.problem
        assert refused.report.compared == len(texts), refused.report
        assert abs(refused.report.agreement - offline) <= 0.01, (refused.report.agreement, offline, lines)
        assert not traffic.errors and sorted(traffic.answers, key=lambda a: a[0]) == list(enumerate(v1))
        assert VersionedModel.read(repo, name).serving_version() == 1 and not (repo / f"{name}_canary").exists()
        no_shadow_in(repo)
        # Below it: promoted; the counts are this shadow's own, not the first one's added in.
        report, traffic, lines = run_shadow(
            server, repo, name, texts, fraction=1.0, requests=len(texts), duration_s=120, min_agreement=offline - 0.03
        )
        assert isinstance(report, ShadowReport), (report, lines)
        assert report.promoted and report.compared == len(texts), report
        assert abs(report.agreement - offline) <= 0.01, (report.agreement, offline)
        disagreeing = sum(a != b for a, b in zip(v1, v2))
        assert sum(n for _, _, n in report.flips) == disagreeing, report.flips
        assert report.candidate_p50_s is not None and 0 < report.candidate_p50_s <= report.candidate_p95_s
        assert not traffic.errors and sorted(traffic.answers, key=lambda a: a[0]) == list(enumerate(v1))
        assert VersionedModel.read(repo, name).serving_version() == 2
        after = Traffic(server.grpc_url, _record(repo, name), texts).start()
        after.join()
        assert not after.errors and all(answer == v2[i] for i, answer in after.answers)
        no_shadow_in(repo)


def _record(repo: Path, name: str):
    from ernie_deploy.repository.served import served_model

    return served_model(repo, name)


# Every layout, and a candidate that dies ----------------------------------------------------------------------------
LAYOUTS = {
    "ensemble": BuildOptions(runtime="python", layout="ensemble", response_cache=True),
    "fused": BuildOptions(runtime="python", layout="fused"),
    "tokenizer-in-model": BuildOptions(runtime="python", layout="tokenizer-in-model"),
    "graph-postprocess": BuildOptions(runtime="python", layout="graph-postprocess"),
}
NAMES = {layout: f"news_{layout.split('-')[0]}" for layout in LAYOUTS}
TEXTS = [f"新闻 {i} 股市 {i % 7} 体育 {'abc' * (i % 4)}" for i in range(120)]


@pytest.fixture(scope="module")
def layouts_server(tiny_pipeline, tmp_path_factory):
    """The tiny classifier under each layout (and a fused copy to kill), each with a version 2 that flips about a
    fifth of TEXTS, on one real server."""
    work = tmp_path_factory.mktemp("shadow_layouts")
    repo = work / "models"
    models = {**NAMES, "kill": "news_kill"}
    for layout, name in models.items():
        build(artifacts(tiny_pipeline, name), repo, LAYOUTS.get(layout, LAYOUTS["fused"]))
    logits = served_logits(repo, NAMES["ensemble"], tiny_pipeline.onnx, TEXTS)
    v2 = flipping_version(tiny_pipeline.onnx, logits, work / "v2" / "model.onnx", 0.2)
    for layout, name in models.items():
        build_version(artifacts(tiny_pipeline, name, onnx=v2), repo, LAYOUTS.get(layout, LAYOUTS["fused"]), version=2)
    with server_for(repo, work / "server.log") as server:
        yield server, repo


@pytest.mark.integration
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_every_layout_shadows_and_promotes(layouts_server, layout):
    server, repo = layouts_server
    name = NAMES[layout]
    v1 = answers_of(repo, name, 1, TEXTS)
    report, traffic, lines = run_shadow(server, repo, name, TEXTS, fraction=1.0, requests=len(TEXTS), duration_s=60)
    assert not isinstance(report, BaseException), (report, lines, server.log_text()[-3000:])
    assert report.compared == len(TEXTS) and report.failed == 0, (report, lines)
    assert report.agreement is not None and report.agreement < 1.0, report  # the versions differ
    assert report.promoted and VersionedModel.read(repo, name).serving_version() == 2
    assert not traffic.errors and all(answer == v1[i] for i, answer in traffic.answers), traffic.errors[:3]
    no_shadow_in(repo)


@pytest.mark.integration
def test_a_candidate_killed_mid_shadow_costs_no_client_request(layouts_server):
    from ernie_deploy.server.watchdog import stub_processes

    server, repo = layouts_server
    name = "news_kill"
    v1 = answers_of(repo, name, 1, TEXTS)
    killed = []

    def kill() -> None:
        time.sleep(1.5)
        stubs = [pid for pid, model in stub_processes(server.pid).items() if model == f"{name}_canary"]
        assert stubs, stub_processes(server.pid)
        for pid in stubs:
            os.kill(pid, signal.SIGKILL)
        killed.extend(stubs)

    refused, traffic, lines = run_shadow(
        server, repo, name, TEXTS, loop=True, during=kill, fraction=1.0, duration_s=6, min_agreement=1.0
    )
    assert killed
    assert traffic.answers and not traffic.errors, traffic.errors[:3]
    assert all(answer == v1[i] for i, answer in traffic.answers)
    assert isinstance(refused, ErnieDeployError), (refused, lines)
    assert refused.report.failed > 0 and refused.report.agree + refused.report.disagree > 0, refused.report
    assert VersionedModel.read(repo, name).serving_version() == 1 and not (repo / f"{name}_canary").exists()
    no_shadow_in(repo)


@pytest.mark.integration
def test_the_command_refuses_a_shadow_no_traffic_reached(layouts_server, capsys):
    from ernie_deploy.cli import main

    server, repo = layouts_server
    name = "news_kill"
    argv = ["rollout", "--model", name, "--to", "2", "-r", str(repo), "--grpc-url", server.grpc_url, "--shadow"]
    assert main([*argv, "--duration", "2", "--metrics-url", server.metrics_url]) == 2
    err = capsys.readouterr().err
    assert "compared no text" in err and "no traffic reached the model" in err and "lengthen --duration" in err, err
    assert VersionedModel.read(repo, name).serving_version() == 1 and not (repo / f"{name}_canary").exists()
    no_shadow_in(repo)


# Refused up front -------------------------------------------------------------------------------------------------
def test_an_ort_model_step_cannot_mirror_and_is_refused_by_name(tiny_pipeline, tmp_path):
    from ernie_deploy.operate.rollout import Move, RolloutReport
    from ernie_deploy.operate.shadow import shadow_step
    from ernie_deploy.repository.served import served_model

    repo = tmp_path / "models"
    options = BuildOptions(runtime="onnxruntime", layout="graph-postprocess")
    build(artifacts(tiny_pipeline, "news"), repo, options)
    build_version(artifacts(tiny_pipeline, "news"), repo, options, version=2)
    model, record = VersionedModel.read(repo, "news"), served_model(repo, "news")
    move = Move(model, record, 1, 2, None, RolloutReport("news", 1, 2), print)
    with pytest.raises(BadOptionsError, match="only a python step can mirror") as refused:
        shadow_step(move, record, 0.1)
    assert "--runtime python" in refused.value.fix and "--layout ensemble" in refused.value.fix
    # the same model on the python runtime mirrors from its model step, to its own version 2
    repo = tmp_path / "python"
    options = LAYOUTS["graph-postprocess"]
    build(artifacts(tiny_pipeline, "news"), repo, options)
    build_version(artifacts(tiny_pipeline, "news"), repo, options, version=2)
    model = VersionedModel.read(repo, "news")
    shadow = shadow_step(Move(model, record, 1, 2, None, RolloutReport("news", 1, 2), print), record, 0.1)
    assert (shadow.step, shadow.plan.candidate, shadow.plan.version, shadow.plan.sends) == (
        "news_model",
        "news_model",
        2,
        "step",
    )
    assert shadow.with_plan().parameters[SHADOW_PARAMETER].string_value == shadow.plan.to_json()
    assert list(shadow.config.version_policy.specific.versions) == [1, 2]


def test_shadow_options_without_shadow_are_refused(capsys):
    from ernie_deploy.cli import main

    assert main(["rollout", "--model", "news", "--to", "2", "--min-agreement", "0.9"]) == 2
    assert "only apply to a shadow evaluation" in capsys.readouterr().err


def test_the_summary_reads_deltas_and_quantiles():
    from ernie_deploy.client.metrics import parse, shadow_summary

    def exposition(agree, disagree, flips, buckets):
        lines = ["# TYPE ernie_deploy_shadow_total counter"]
        own = 'model="news",version="1",candidate="2"'
        lines += [f'ernie_deploy_shadow_total{{{own},outcome="agree"}} {agree}']
        lines += [f'ernie_deploy_shadow_total{{{own},outcome="disagree"}} {disagree}']
        lines += ['ernie_deploy_shadow_total{model="other",version="1",candidate="2",outcome="agree"} 99']
        lines += ["# TYPE ernie_deploy_shadow_flips_total counter"]
        lines += [
            f'ernie_deploy_shadow_flips_total{{{own},serving_label="{s}",candidate_label="{c}"}} {n}'
            for (s, c), n in flips.items()
        ]
        # Triton writes the histogram's series as counters of their own names (no `_total`)
        lines += ["# TYPE ernie_deploy_shadow_candidate_seconds_bucket counter"]
        lines += [f'ernie_deploy_shadow_candidate_seconds_bucket{{{own},le="{le}"}} {n}' for le, n in buckets]
        return "\n".join(lines) + "\n"

    before = shadow_summary(
        parse(exposition(10, 5, {("a", "b"): 5}, [("0.01", 10), ("0.1", 15), ("+Inf", 15)])), "news", 1, "2"
    )
    now = shadow_summary(
        parse(
            exposition(
                40, 15, {("a", "b"): 10, ("a", "c"): 5, ("a", "a"): 40}, [("0.01", 30), ("0.1", 55), ("+Inf", 55)]
            )
        ),
        "news",
        1,
        "2",
    )
    delta = now.since(before)
    assert (delta.agree, delta.disagree, delta.compared) == (30, 10, 40)
    assert delta.agreement == 0.75
    assert delta.off_diagonal() == [("a", "b", 5), ("a", "c", 5)]
    # 20 of the 40 new requests at or under 0.01 s: the 10th is halfway into the first bucket, the 38th in the second
    assert delta.quantile(0.25) == pytest.approx(0.005)
    assert 0.01 < delta.quantile(0.95) <= 0.1
