"""Hugging Face's and TEI's scoring parameters on the gateway, on a real tritonserver through real HTTP: `top_k`,
`function_to_apply` (huggingface_hub's InferenceClient, unchanged) and TEI's `raw_scores`, each checked against what
the gRPC client reads from the same model."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.core.tasks import MULTI_LABEL, SEQ_CLS
from tests.conftest import NEWS_TEXTS, artifacts
from tests.test_gateway import _post

SEQ = "news"
TEXTS = NEWS_TEXTS[:4]


@pytest.fixture(scope="module")
def stack(tmp_path_factory, tiny_pipeline):
    from ernie_deploy.gateway.process import GatewayProcess
    from ernie_deploy.repository.build import build
    from ernie_deploy.repository.options import BuildOptions
    from ernie_deploy.server.process import TritonServer

    work = tmp_path_factory.mktemp("gateway_scores")
    repo = work / "models"
    build(artifacts(tiny_pipeline, SEQ), repo, BuildOptions(runtime="python"))
    with TritonServer(repo, http_port=0, grpc_port=0, metrics_port=0, log_file=work / "server.log") as server:
        with GatewayProcess(repo, server.grpc_url, log_file=work / "gateway.log").start(timeout=60) as gateway:
            yield server, gateway, repo


def _served(server, repo) -> dict:
    from ernie_deploy.client.grpc_client import Client
    from ernie_deploy.repository.served import served_model

    with Client(SEQ_CLS, server.grpc_url, model=served_model(repo, SEQ), asked=("probabilities", "logits")) as client:
        return client.infer(TEXTS)


@pytest.mark.integration
def test_inference_client_reads_top_k_and_raw_scores(stack):
    from huggingface_hub import InferenceClient

    server, gateway, repo = stack
    served = _served(server, repo)
    client = InferenceClient(model=f"{gateway.url}/hf/{SEQ}")
    for i, text in enumerate(TEXTS):
        label = served["label"][i, 0].decode()
        top = client.text_classification(text, top_k=10)
        scores = [a.score for a in top]
        assert len(top) == 10 and abs(sum(scores) - 1) < 1e-4
        assert scores == sorted(scores, reverse=True) and top[0].label == label
        assert top[0].score == pytest.approx(float(served["confidence"][i, 0]), abs=1e-6)
        raw = client.text_classification(text, top_k=10, function_to_apply="none")
        assert raw[0].label == label
        assert sorted(a.score for a in raw) == pytest.approx(sorted(served["logits"][i].tolist()), abs=1e-5)
        sigmoid = client.text_classification(text, top_k=3, function_to_apply="sigmoid")
        assert len(sigmoid) == 3 and all(0 < a.score < 1 for a in sigmoid) and sigmoid[0].label == label
        assert [a.label for a in client.text_classification(text)] == [label]  # no top_k: the best label alone


@pytest.mark.integration
def test_tei_raw_scores_are_the_logits(stack):
    server, gateway, repo = stack
    served = _served(server, repo)
    status, _, answer = _post(f"{gateway.url}/hf/{SEQ}/predict", {"inputs": TEXTS[0], "raw_scores": True})
    assert status == 200 and len(answer) == served["logits"].shape[1]
    assert answer[0]["label"] == served["label"][0, 0].decode()
    assert max(a["score"] for a in answer) == pytest.approx(float(served["logits"][0].max()), abs=1e-5)
    status, _, refused = _post(
        f"{gateway.url}/hf/{SEQ}/predict",
        {"inputs": TEXTS[0], "raw_scores": True, "parameters": {"function_to_apply": "softmax"}},
    )
    assert status == 422 and "raw_scores" in refused["error"]


def test_the_gateway_asks_for_scores_only_when_a_request_needs_them():
    from ernie_deploy.gateway.app import KIND_JSON

    sequence, multi = KIND_JSON["sequence"], KIND_JSON["multi_label"]
    assert sequence.asks({}) == () and sequence.asks({"top_k": 1}) == ()
    assert sequence.asks({"top_k": 5}) == ("probabilities",)
    assert sequence.asks({"function_to_apply": "none"}) == ("logits",)
    assert multi.asks({"top_k": 2}) == () and multi.asks({"function_to_apply": "softmax"}) == ("logits",)


def test_a_set_of_labels_under_another_function():
    from ernie_deploy.gateway.app import KIND_JSON

    model = ModelSpec.new(MULTI_LABEL, "tags", labels=("LOC", "ORG", "PER"))
    logits = np.array([[0.5, -1.0, 2.0]], dtype=np.float32)
    answers = {
        "labels": np.array([json.dumps([]).encode()], dtype=np.object_).reshape(-1, 1),
        "scores": 1 / (1 + np.exp(-logits)),
        "logits": logits,
    }
    softmax = KIND_JSON["multi_label"].hugging_face(answers, model, {"function_to_apply": "softmax"})[0]
    assert [p["label"] for p in softmax] == ["PER", "LOC", "ORG"]
    assert sum(p["score"] for p in softmax) == pytest.approx(1.0)
    raw = KIND_JSON["multi_label"].hugging_face(answers, model, {"function_to_apply": "none", "top_k": 1})[0]
    assert raw == [{"label": "PER", "score": pytest.approx(2.0)}]
