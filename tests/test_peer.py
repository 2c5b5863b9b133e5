"""The peer (PaddleNLP SimpleServing on our static model, benchmarks/peer): a real server process over real HTTP,
answering like in-process Paddle and ONNX, stopped with nothing left behind."""

from __future__ import annotations

import json
import urllib.request

import numpy as np
import pytest

from benchmarks.peer.app import HANDLERS
from benchmarks.peer.server import PeerServer, peer_available, peer_predictions, request_body
from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.tasks import SEQ_CLS, TOKEN_CLS

pytestmark = pytest.mark.skipif(not peer_available(), reason="paddlenlp (SimpleServing) is not installed")

TEXTS = ["国足公布世预赛名单", "股市大涨", "新闻 game", "体育 sports 2024", "中国美元亿", "教育科技"]


def _post(url: str, body: bytes) -> dict:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    with opener.open(request, timeout=60) as response:
        assert response.status == 200
        return json.loads(response.read())


@pytest.mark.integration
def test_peer_answers_like_in_process_paddle_and_onnx_and_stops_cleanly(tiny_pipeline):
    from ernie_deploy.evaluate.inputs import ModelInputs, reference_predictions
    from ernie_deploy.export.static import PaddlePredictor
    from ernie_deploy.server.preflight import check_port_free
    from ernie_deploy.server.procs import group_members
    from ernie_deploy.serving.encoding import encode_items
    from ernie_deploy.serving.tokenizer import build_tokenizer

    static = tiny_pipeline.static
    server = PeerServer(static.root, static.spec).start(timeout=120)
    try:
        assert server.is_running() and server.url.startswith("http://127.0.0.1:")
        # The body SimpleServing's clients send; the answer is its post handler's: label ids and confidences.
        result = _post(server.url, request_body(SEQ_CLS, TEXTS, 128))["result"]
        peer_ids, peer_conf = result["label"], np.array(result["confidence"])

        encoded = encode_items(build_tokenizer(static.vocab_file), TEXTS, 128)
        logits = PaddlePredictor(static)(encoded.input_ids, encoded.token_type_ids)
        probs = np.exp(logits - logits.max(1, keepdims=True))
        probs /= probs.sum(1, keepdims=True)
        assert peer_ids == logits.argmax(1).tolist()
        np.testing.assert_allclose(peer_conf, probs.max(1), atol=1e-4)

        onnx = reference_predictions(ModelInputs(static.spec, tiny_pipeline.onnx, static, TEXTS), TEXTS)
        assert peer_predictions(server.url, static.spec, TEXTS, batch=4) == onnx
        assert [static.labels[i] for i in peer_ids] == onnx
        pgid = server.pid
    finally:
        server.stop()
    assert not server.is_running() and group_members(pgid) == []
    check_port_free("127.0.0.1", server.port, "peer")  # nothing listens there any more


def test_peer_refuses_a_model_it_has_no_handler_for(tmp_path):
    from ernie_deploy.core.spec import ModelSpec

    with pytest.raises(ErnieDeployError, match="no handler"):
        PeerServer(tmp_path, ModelSpec.new(TOKEN_CLS))


def test_request_body_is_what_simple_serving_clients_send():
    from ernie_deploy.core.tasks import PAIR_CLS

    body = json.loads(request_body(SEQ_CLS, ["a", "b"], 128))
    assert body == {"data": {"text": ["a", "b"]}, "parameters": {"max_seq_len": 128, "batch_size": 2}}
    pair = json.loads(request_body(PAIR_CLS, [("a", "b")], 64))
    assert pair["data"] == {"text": ["a"], "text_pair": ["b"]}


def test_the_peer_serves_kinds_there_are():
    # A kind missing from HANDLERS gets no peer row; a key that names no kind would never be used.
    from ernie_deploy.kinds import KINDS

    assert set(HANDLERS) <= set(KINDS) and "sequence" in HANDLERS
