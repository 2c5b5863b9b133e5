"""End to end on a real tritonserver over real gRPC: the served accuracy equals Paddle-native accuracy."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ernie_deploy.client import Client
from ernie_deploy.errors import ErnieDeployError
from ernie_deploy.tasks import SEQ_CLS

from .conftest import ROOT, load_baseline

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def offline_scores(seq_cls_pipeline):
    from ernie_deploy.evaluate import evaluate

    p = seq_cls_pipeline
    return evaluate(SEQ_CLS, p.static, p.onnx, p.data / "test.tsv")


def test_offline_onnx_accuracy_equals_paddle(offline_scores):
    assert abs(offline_scores["onnx"]["accuracy"] - offline_scores["paddle"]["accuracy"]) <= 0.001


def test_served_accuracy_equals_paddle_and_beats_baseline(seq_cls_server, seq_cls_pipeline, offline_scores, tmp_path):
    report = tmp_path / "served.json"
    result = subprocess.run(
        [sys.executable, str(ROOT / "clients" / "seq_cls_grpc_client.py"), "--url", seq_cls_server.grpc_url,
         "--data", str(seq_cls_pipeline.data / "test.tsv"), "--report", str(report)],
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("accuracy: ") and last.endswith("(n=1000)"), last
    served = float(last.split()[1])
    paddle = offline_scores["paddle"]["accuracy"]
    assert abs(served - paddle) <= 0.001, f"served {served} vs paddle {paddle}"
    baseline = load_baseline("seq_cls")
    assert served >= baseline["min_accuracy"], f"served {served} fell below the baseline {baseline['min_accuracy']}"


def test_server_answers_bad_input_with_an_error_and_stays_up(seq_cls_server):
    with Client(SEQ_CLS, seq_cls_server.grpc_url) as client:
        with pytest.raises(ErnieDeployError, match="text 1 is empty"):
            client.infer(["国足公布世预赛名单", ""])
        out = client.infer(["国足公布世预赛名单"])
        assert out["label"].shape == (1, 1)


def test_client_names_a_missing_server():
    with Client(SEQ_CLS, "127.0.0.1:9") as client:
        with pytest.raises(ErnieDeployError, match="no Triton server answers"):
            client.check_ready()
