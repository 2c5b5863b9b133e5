"""End to end on a real tritonserver over real gRPC: the served score equals the Paddle-native score, per task."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ernie_deploy.client.grpc_client import Client
from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.tasks import ON_REQUEST, SEQ_CLS, TOKEN_CLS
from ernie_deploy.export.gates import counted, within
from ernie_deploy.fetch.data import split_file

from .conftest import ROOT, shipped_scores

pytestmark = pytest.mark.integration

TEST_SIZE = {"seq_cls": 1000, "token_cls": 5000, "pair_cls": 1000, "multi_label": 5000, "uie": 5000}


@pytest.fixture(scope="module", params=sorted(TEST_SIZE))
def task_run(request):
    """(pipeline, offline scores) of one task; the pipeline fixture converts its shipped demo model."""
    from ernie_deploy.evaluate.offline import evaluate

    pipeline = request.getfixturevalue(f"{request.param}_pipeline")
    test = split_file(pipeline.data, "test", pipeline.task.split_format)
    return pipeline, test, evaluate(pipeline.static.spec, pipeline.static, pipeline.onnx, test)


def test_offline_scores_are_the_shipped_models_own(task_run):
    """The shipped weights score on this machine exactly what their manifest records (the figures the docs give)."""
    pipeline, _, scores = task_run
    metric, shipped = pipeline.task.metric, shipped_scores(pipeline.task.name)
    assert (scores["paddle"][metric], scores["onnx"][metric]) == (shipped["test"], shipped["test_onnx"]), scores


def test_served_score_equals_paddle_and_the_shipped_score(task_run, every_kind_server, tmp_path):
    """Each kind's client script against one server that serves every kind."""
    pipeline, test, scores = task_run
    task = pipeline.task
    report = tmp_path / "served.json"
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "clients" / f"{task.name}_grpc_client.py"),
            "--grpc-url",
            every_kind_server.grpc_url,
            "--data",
            str(test),
            "--report",
            str(report),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith(f"{task.metric}: ") and last.endswith(f"(n={TEST_SIZE[task.name]})"), last
    served_report = json.loads(report.read_text())
    served = served_report[task.metric]  # the score itself; the printed line rounds it to 4 decimals
    assert float(last.split()[1]) == pytest.approx(served, abs=1e-4)
    paddle = scores["paddle"][task.metric]
    # A tenth of a point, as counts of texts where the score is a fraction of them (accuracy: at most 1 of 1,000).
    n = counted(served_report)
    assert within(served, paddle, 0.001, n=n), f"served {served} vs paddle {paddle}"
    assert served == shipped_scores(task.name)["test"], f"served {served}, the shipped model's manifest another"


def test_served_entities_point_into_the_text(server, token_cls_pipeline):
    from ernie_deploy.evaluate.offline import onnx_predictions, window_of

    sentence = "新华社北京电，国务院总理李鹏今天在人民大会堂会见了日本客人。"
    texts = [
        sentence,
        "张三2008年在上海 iPhone 店工作",
        "王" * 400,
        sentence * 8,  # 240 characters: NER reads the whole text in windows, nothing is cut
    ]
    with Client(TOKEN_CLS, server.grpc_url) as client:
        out = client.infer(texts)
        entities = client.predict(texts, progress=False)
    assert out["truncated"][:, 0].tolist() == [False] * len(texts)
    p = token_cls_pipeline
    # The export's record, which `build` serves as it reads by default: in windows of the length it was trained on.
    assert window_of(p.static.spec).size == p.static.spec.window_default < p.static.spec.max_seq_len
    offline = onnx_predictions(p.static.spec, p.onnx, p.static.vocab_file, texts)
    assert entities == offline
    assert entities[0], "the bootstrap model finds entities in a plain news sentence"
    for text, found in zip(texts, entities):
        for e in found:
            assert 0 <= e["start"] < e["end"] <= len(text) and text[e["start"] : e["end"]] == e["text"], e
    # Entities past the first window are found: the last copy of the sentence, at characters 210-240, has them.
    assert any(e["start"] >= 7 * len(sentence) for e in entities[3]), entities[3]


def test_server_answers_bad_input_with_an_error_and_stays_up(server):
    for task in (SEQ_CLS, TOKEN_CLS):
        with Client(task, server.grpc_url) as client:
            with pytest.raises(ErnieDeployError, match="text 1 is empty"):
                client.infer(["国足公布世预赛名单", ""])
            out = client.infer(["国足公布世预赛名单"])
            # Every answer of one text, one element each; those computed on request only (ON_REQUEST) are not asked.
            answered = [o for o in task.outputs if o.name not in ON_REQUEST]
            assert set(out) == {o.name for o in answered} and all(out[o.name].shape == (1, 1) for o in answered)


def test_client_names_a_missing_server():
    with Client(SEQ_CLS, "127.0.0.1:9") as client:
        with pytest.raises(ErnieDeployError, match="no Triton server answers"):
            client.check_ready()


@pytest.fixture(scope="module")
def fused_server(tmp_path_factory, seq_cls_pipeline, token_cls_pipeline):
    """Both tasks built with `build --fused` (one python model per task) on a real tritonserver."""
    from ernie_deploy.repository.build import build, model_artifacts
    from ernie_deploy.repository.options import BuildOptions
    from ernie_deploy.server.process import TritonServer

    repo = tmp_path_factory.mktemp("fused_models")
    entries = [model_artifacts(p.static, p.onnx) for p in (seq_cls_pipeline, token_cls_pipeline)]
    build(entries, repo, BuildOptions(runtime="python", layout="fused"))
    with TritonServer(repo, http_port=0, grpc_port=0, metrics_port=0, log_file=repo.parent / "fused.log") as fused:
        yield fused


@pytest.mark.parametrize("task", [SEQ_CLS, TOKEN_CLS], ids=lambda t: t.name)
def test_fused_layout_serves_what_the_ensemble_serves(task, server, fused_server, request):
    """Same texts, both layouts, under concurrent load (so requests of different lengths share batches):
    identical predictions."""
    from concurrent.futures import ThreadPoolExecutor

    from ernie_deploy.fetch.data import read_split

    pipeline = request.getfixturevalue(f"{task.name}_pipeline")
    texts = read_split(pipeline.data, "test", task.split_format)[0][:400]

    def served(url):
        def one(chunk):
            with Client(task, url) as client:
                return client.predict(chunk, batch_size=1, progress=False)

        with ThreadPoolExecutor(8) as pool:
            return [p for part in pool.map(one, [texts[i::8] for i in range(8)]) for p in part]

    assert served(fused_server.grpc_url) == served(server.grpc_url)
    with Client(task, fused_server.grpc_url) as client:
        with pytest.raises(ErnieDeployError, match="text 0 is empty"):
            client.infer([" "])
