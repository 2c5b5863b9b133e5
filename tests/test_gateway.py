"""The HTTP gateway (`ernie-deploy gateway`, ernie_deploy.gateway) on a real tritonserver serving the tiny models,
as a real process over real HTTP: Hugging Face's InferenceClient and SimpleServing's clients call it unchanged and
get what the gRPC client gets; bad input, an oversized body and overload get 4xx/503 in each contract's shape at once
and the gateway answers afterwards; /ready follows the models; /metrics counts what was asked."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

from ernie_deploy.core.tasks import SEQ_CLS
from tests.conftest import NEWS_TEXTS, artifacts

pytestmark = pytest.mark.integration

SEQ = "news"  # max_text_chars MAX_CHARS
SEQ_PADDLENLP = "news_paddlenlp"  # the same model in PaddleNLP's wire (build --io paddlenlp)
NER = "ner"
ADDED = "news_added"  # built while the gateway runs
MAX_CHARS = 40
MAX_BODY = 200_000
TEXTS = NEWS_TEXTS[:6]
NER_TEXTS = ["国足公布世预赛名单", "中国美元亿新闻", "股市大涨 abc 中国", "体育教育科技社会"]


@pytest.fixture(scope="module")
def stack(tmp_path_factory, tiny_pipeline, tiny_token_pipeline):
    """(tritonserver, gateway, repository): the three models built, served and behind one gateway."""
    from ernie_deploy.gateway.process import GatewayProcess
    from ernie_deploy.repository.build import build
    from ernie_deploy.repository.options import BuildOptions
    from ernie_deploy.server.process import TritonServer

    work = tmp_path_factory.mktemp("gateway")
    repo = work / "models"
    build(artifacts(tiny_pipeline, SEQ), repo, BuildOptions(runtime="python", max_text_chars=MAX_CHARS))
    build(artifacts(tiny_pipeline, SEQ_PADDLENLP), repo, BuildOptions(runtime="python", io="paddlenlp"))
    build(artifacts(tiny_token_pipeline, NER), repo, BuildOptions(runtime="python"))
    with TritonServer(repo, http_port=0, grpc_port=0, metrics_port=0, log_file=work / "server.log") as server:
        gateway = GatewayProcess(
            repo, server.grpc_url, args=["--max-body-bytes", str(MAX_BODY)], log_file=work / "gateway.log"
        )
        with gateway.start(timeout=60):
            yield server, gateway, repo


def _post(url: str, body, headers=None, timeout=30) -> tuple[int, dict, object]:
    """(status, headers by lowercase name, JSON) of a POST; `body` is JSON unless bytes."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url, data, {"Content-Type": "application/json", **(headers or {})})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=timeout) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, json.loads(exc.read())


def _get(url: str) -> tuple[int, str]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _read_all(sock: socket.socket) -> str:
    """What the server sends until it closes the connection."""
    parts = []
    while chunk := sock.recv(65536):
        parts.append(chunk)
    return b"".join(parts).decode()


def _grpc(server, repo, name: str, texts: list) -> list:
    from ernie_deploy.client.grpc_client import Client
    from ernie_deploy.repository.served import served_model

    record = served_model(repo, name)
    with Client(record.task_spec, server.grpc_url, model=record) as client:
        return client.predict(texts, progress=False)


def test_hugging_face_clients_get_what_the_grpc_client_gets(stack):
    from huggingface_hub import InferenceClient

    server, gateway, repo = stack
    for name in (SEQ, SEQ_PADDLENLP):
        client = InferenceClient(model=f"{gateway.url}/hf/{name}")
        expected = _grpc(server, repo, name, TEXTS)
        for text, label in zip(TEXTS, expected):
            answer = client.text_classification(text)
            assert isinstance(answer, list) and [a.label for a in answer] == [label]
            assert 0 < answer[0].score <= 1
    client = InferenceClient(model=f"{gateway.url}/hf/{NER}")
    expected = _grpc(server, repo, NER, NER_TEXTS)
    assert any(expected), "the tiny NER model finds no entity in these texts: the comparison would be empty"
    for text, entities in zip(NER_TEXTS, expected):
        answer = client.token_classification(text)
        assert [(a.entity_group, a.word, a.start, a.end) for a in answer] == [
            (e["type"], e["text"], e["start"], e["end"]) for e in entities
        ]
        assert all(text[a.start : a.end] == a.word for a in answer)
        assert [a.score for a in answer] == pytest.approx([e["score"] for e in entities], abs=1e-6)


def test_tei_predict_takes_one_input_and_a_batch(stack):
    server, gateway, repo = stack
    expected = _grpc(server, repo, SEQ, TEXTS)
    status, _, one = _post(f"{gateway.url}/hf/{SEQ}/predict", {"inputs": TEXTS[0]})
    assert status == 200 and [p["label"] for p in one] == [expected[0]]  # TEI: one input, its list of labels
    status, _, batch = _post(f"{gateway.url}/hf/{SEQ}/predict", {"inputs": [[t] for t in TEXTS]})
    assert status == 200 and [[p["label"] for p in answer] for answer in batch] == [[label] for label in expected]
    status, _, batch = _post(f"{gateway.url}/hf/{SEQ}", {"inputs": TEXTS})  # a list of texts: one answer each
    assert status == 200 and [answer[0]["label"] for answer in batch] == expected


def test_simple_serving_answers_as_simple_serving_does(stack, tiny_pipeline):
    from benchmarks.peer.server import PeerServer, peer_available, request_body

    server, gateway, repo = stack
    body = request_body(SEQ_CLS, TEXTS, 128)
    status, _, ours = _post(f"{gateway.url}/models/{SEQ}", body)
    assert status == 200 and set(ours) == {"result"} and set(ours["result"]) == {"label", "confidence"}
    labels = tiny_pipeline.static.labels
    assert [labels[i] for i in ours["result"]["label"]] == _grpc(server, repo, SEQ, TEXTS)
    status, _, paddlenlp_wire = _post(f"{gateway.url}/models/{SEQ_PADDLENLP}", body)
    assert status == 200 and paddlenlp_wire["result"]["label"] == ours["result"]["label"]
    if not peer_available():
        pytest.skip("paddlenlp (SimpleServing) is not installed: the peer's answer is not compared")
    static = tiny_pipeline.static
    with PeerServer(static.root, static.spec).start(timeout=120) as peer:
        status, _, theirs = _post(peer.url, body, timeout=120)
    assert status == 200
    assert set(theirs) == set(ours) and set(theirs["result"]) == set(ours["result"])
    assert theirs["result"]["label"] == ours["result"]["label"]
    assert ours["result"]["confidence"] == pytest.approx(theirs["result"]["confidence"], abs=1e-4)


def test_simple_serving_answers_entities_for_a_token_model(stack):
    server, gateway, repo = stack
    status, _, answer = _post(f"{gateway.url}/models/{NER}", {"data": {"text": NER_TEXTS}, "parameters": {}})
    assert status == 200 and answer == {"result": {"entities": _grpc(server, repo, NER, NER_TEXTS)}}


# (route, body, status, words the message must hold): each refused in its contract's shape
BAD = [
    ("models", b'{"data": {"text": ["a"]', 422, "not JSON"),
    ("models", {"data": {"text": [1]}}, 422, "text[0] is int"),
    ("models", {"data": {"text": ["a"]}, "parameters": 5}, 422, "parameters is int"),
    ("models", {"data": {"text": ["a"]}, "extra": 1}, 422, "unknown field 'extra'"),
    ("models", {"data": {"text": ["中" * (MAX_CHARS + 1)]}}, 413, "max_text_chars"),
    ("hf", b"not json", 422, "not JSON"),
    ("hf", {"inputs": 5}, 422, "inputs is int"),
    ("hf", {"inputs": []}, 400, "empty"),
    ("hf", {"inputs": "a", "parameters": {"function_to_apply": "tanh"}}, 422, "'softmax', 'sigmoid', 'none'"),
    ("hf", {"inputs": "中" * (MAX_CHARS + 1)}, 413, "max_text_chars"),
]


@pytest.mark.parametrize("route, body, status, words", BAD, ids=[f"{r}-{s}-{w}" for r, _, s, w in BAD])
def test_bad_input_is_refused_in_the_contracts_shape(stack, route, body, status, words):
    _, gateway, _ = stack
    got, _, answer = _post(f"{gateway.url}/{route}/{SEQ}", body)
    assert got == status, answer
    if route == "models":
        detail = answer["detail"]
        text = detail if isinstance(detail, str) else detail[0]["msg"]
        assert isinstance(detail, str) or {"type", "loc", "msg"} <= set(detail[0])
    else:
        assert set(answer) == {"error", "error_type"}
        text = answer["error"]
    assert words in text and "Traceback" not in text
    assert _post(f"{gateway.url}/hf/{SEQ}", {"inputs": TEXTS[0]})[0] == 200  # still answering


def test_an_unknown_model_is_a_404_naming_the_models(stack):
    _, gateway, _ = stack
    status, _, answer = _post(f"{gateway.url}/models/nosuch", {"data": {"text": ["a"]}})
    assert status == 404 and "nosuch" in answer["detail"] and SEQ in answer["detail"]
    status, _, answer = _post(f"{gateway.url}/hf/nosuch", {"inputs": "a"})
    assert status == 404 and answer["error_type"] == "not_found" and NER in answer["error"]


def test_a_body_over_the_limit_is_refused_before_it_is_read(stack):
    _, gateway, _ = stack
    host, port = gateway.host, gateway.port
    # A Content-Length of 1 GB with a small body: the answer comes at once, without waiting for the rest.
    with socket.create_connection((host, port), timeout=10) as sock:
        t0 = time.monotonic()
        sock.sendall(
            f"POST /hf/{SEQ} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f'Content-Length: 1000000000\r\n\r\n{{"inputs": '.encode()
        )
        answer = _read_all(sock)
        assert time.monotonic() - t0 < 5
    assert answer.startswith("HTTP/1.1 413") and "max-body-bytes" in answer and '"error_type":"validation"' in answer
    # A chunked body (no Content-Length) is counted as it comes in. urllib sends the whole body before it reads: the
    # gateway reads the rest and throws it away before its 413 (tests/test_gateway_413.py), so urllib reads it.
    chunks = (b'{"data": {"text": ["' + b"a" * 100_000 + b'"]}}' for _ in range(3))
    request = urllib.request.Request(f"{gateway.url}/models/{SEQ}", chunks, {"Transfer-Encoding": "chunked"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=30)
    assert refused.value.code == 413 and "max-body-bytes" in json.loads(refused.value.read())["detail"]
    assert _post(f"{gateway.url}/hf/{SEQ}", {"inputs": TEXTS[0]})[0] == 200


def test_overload_is_refused_at_once_with_retry_after(stack):
    """With --max-concurrent-requests 1, one request whose body trickles in holds the one place: the others get 503
    with Retry-After at once, and once it is answered the next one is served."""
    from ernie_deploy.gateway.process import GatewayProcess

    server, _, repo = stack
    with GatewayProcess(repo, server.grpc_url, args=["--max-concurrent-requests", "1"]).start(timeout=60) as gateway:
        body = json.dumps({"inputs": TEXTS[0]}).encode()
        slow = socket.create_connection((gateway.host, gateway.port), timeout=30)
        slow.sendall(
            f"POST /hf/{SEQ} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body[:5]
        )
        time.sleep(0.5)  # the slow request is in flight, reading its body
        answers = []

        def call():
            t0 = time.monotonic()
            answers.append((*_post(f"{gateway.url}/hf/{SEQ}", {"inputs": TEXTS[1]}), time.monotonic() - t0))

        threads = [threading.Thread(target=call) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(answers) == 4
        for status, headers, answer, seconds in answers:
            assert status == 503 and headers.get("retry-after") == "1" and answer["error_type"] == "overloaded"
            assert seconds < 2
        slow.sendall(body[5:])
        assert slow.recv(65536).decode().startswith("HTTP/1.1 200")  # its headers come first
        slow.close()
        assert _post(f"{gateway.url}/hf/{SEQ}", {"inputs": TEXTS[1]})[0] == 200
        metrics = _get(f"{gateway.url}/metrics")[1]
        assert 'ernie_gateway_errors_total{error_type="overloaded",route="/hf/{model}",status="503"} 4.0' in metrics


def test_ready_follows_triton_and_every_model(stack):
    import tritonclient.http as httpclient

    from ernie_deploy.gateway.process import GatewayProcess
    from ernie_deploy.server.preflight import free_ports

    server, gateway, repo = stack
    assert _get(f"{gateway.url}/ready")[0] == 200 and _get(f"{gateway.url}/health")[0] == 200
    admin = httpclient.InferenceServerClient(server.http_url.removeprefix("http://"))
    admin.unload_model(NER)
    try:
        deadline = time.monotonic() + 30
        while admin.is_model_ready(NER) and time.monotonic() < deadline:
            time.sleep(0.2)
        status, body = _get(f"{gateway.url}/ready")
        assert status == 503 and json.loads(body)["models"][NER] is not True
        status, _, answer = _post(f"{gateway.url}/hf/{NER}", {"inputs": NER_TEXTS[0]})
        assert status == 503 and answer["error_type"] == "unhealthy"
    finally:
        admin.load_model(NER)
    assert _get(f"{gateway.url}/ready")[0] == 200
    # No Triton at all: live, not ready.
    nowhere = f"127.0.0.1:{free_ports(1)[0]}"
    with GatewayProcess(repo, nowhere).start(timeout=60, ready=False) as lonely:
        status, body = _get(f"{lonely.url}/ready")
        assert status == 503 and "no Triton server answers" in json.loads(body)["server"]
        assert _get(f"{lonely.url}/health")[0] == 200


def test_a_model_built_later_is_found(stack, tiny_pipeline):
    import tritonclient.http as httpclient

    from ernie_deploy.repository.build import build
    from ernie_deploy.repository.options import BuildOptions

    server, gateway, repo = stack
    assert _post(f"{gateway.url}/hf/{ADDED}", {"inputs": "a"})[0] == 404
    build(artifacts(tiny_pipeline, ADDED), repo, BuildOptions(runtime="python"))
    httpclient.InferenceServerClient(server.http_url.removeprefix("http://")).load_model(ADDED)
    time.sleep(1.1)  # the gateway reads the repository again at most once a second
    status, _, answer = _post(f"{gateway.url}/hf/{ADDED}", {"inputs": TEXTS[0]})
    assert status == 200 and answer[0][0]["label"] == _grpc(server, repo, ADDED, TEXTS[:1])[0]
    status, body = _get(f"{gateway.url}/info")
    models = {m["name"]: m for m in json.loads(body)["models"]}
    assert status == 200 and ADDED in models and models[SEQ]["max_text_chars"] == MAX_CHARS
    assert models[SEQ_PADDLENLP]["io"] == "paddlenlp" and models[NER]["hugging_face_task"] == "token-classification"


def test_metrics_count_requests_errors_and_latency(stack):
    _, gateway, _ = stack
    _post(f"{gateway.url}/models/{SEQ}", {"data": {"text": TEXTS}})
    _post(f"{gateway.url}/hf/{SEQ}", {"inputs": 5})
    status, metrics = _get(f"{gateway.url}/metrics")
    assert status == 200
    assert 'ernie_gateway_requests_total{route="/models/{model}",status="200"}' in metrics
    assert 'ernie_gateway_errors_total{error_type="validation",route="/hf/{model}",status="422"}' in metrics
    assert 'ernie_gateway_request_duration_seconds_bucket{le="0.1",route="/models/{model}"}' in metrics
    assert 'ernie_gateway_request_duration_seconds_count{route="/hf/{model}"}' in metrics
    assert "nosuch" not in metrics  # a name a client sent is never a label


def test_sigterm_stops_the_gateway_cleanly(stack):
    from ernie_deploy.gateway.process import GatewayProcess
    from ernie_deploy.server.procs import group_members

    server, _, repo = stack
    gateway = GatewayProcess(repo, server.grpc_url).start(timeout=60)
    pgid = gateway.pid
    t0 = time.monotonic()
    # uvicorn finishes, closes the app (and its gRPC channel), then exits by the signal it was sent, so that a
    # supervisor sees a SIGTERM exit: -15, never a SIGKILL after the timeout.
    assert gateway.stop(timeout=10) == -signal.SIGTERM and time.monotonic() - t0 < 10
    assert group_members(pgid) == []
    assert "Application shutdown complete" in gateway.log_text()


def test_a_set_of_labels_as_each_contracts_json():
    """multi_label's JSON (no tiny multi-label model is built here: its answers are made as the model makes them)."""
    import numpy as np

    from ernie_deploy.core.errors import BadRequest
    from ernie_deploy.core.spec import ModelSpec
    from ernie_deploy.core.tasks import MULTI_LABEL
    from ernie_deploy.gateway.app import KIND_JSON

    model = ModelSpec.new(MULTI_LABEL, "tags", labels=("LOC", "ORG", "PER"))
    kept = [[{"label": "PER", "score": 0.9}, {"label": "LOC", "score": 0.6}], []]
    answers = {
        "labels": np.array([json.dumps(k).encode() for k in kept], dtype=np.object_).reshape(-1, 1),
        "scores": np.array([[0.6, 0.2, 0.9], [0.1, 0.3, 0.2]], dtype=np.float32),
    }
    json_ = KIND_JSON["multi_label"]
    result = json_.simple_serving(answers, model, {})
    assert result["label"] == [[2, 0], []] and result["confidence"] == [pytest.approx([0.9, 0.6]), []]
    assert json_.simple_serving(answers, model, {"prob_limit": 0.25})["label"] == [[0, 2], [1]]
    ranked = json_.hugging_face(answers, model, {"top_k": 2})
    assert [[p["label"] for p in answer] for answer in ranked] == [["PER", "LOC"], ["ORG", "PER"]]
    with pytest.raises(BadRequest, match="'softmax', 'sigmoid', 'none'"):
        json_.hugging_face(answers, model, {"function_to_apply": "tanh"})
    with pytest.raises(BadRequest, match="top_k"):
        json_.hugging_face(answers, model, {"top_k": 0})


@pytest.mark.integration
def test_the_gateway_bench_smoke_runs(tiny_pipeline, tmp_path, capsys):
    """`bash scripts/bench.sh gateway` in miniature: every variant measured, answers checked, ratios written."""
    from benchmarks.gateway import run_gateway
    from ernie_deploy.evaluate.inputs import ModelInputs

    p = tiny_pipeline
    item = ModelInputs(p.static.spec, p.onnx, p.static, ["国足公布世预赛名单", "股市大涨", "新闻 game"] * 20)
    record = run_gateway([item], tmp_path, rounds=1, duration_s=0.3, warmup_s=0.1, peer=False)
    cells = {(r["variant"], r["batch"], r["concurrency"]) for r in record["best"]}
    assert {("grpc", 1, 8), ("gateway simple", 1, 8), ("gateway hf", 1, 1), ("gateway simple", 32, 8)} <= cells
    assert all(r["requests"] > 0 for r in record["best"]) and (tmp_path / "gateway.json").exists()
    assert record["ratios"]["c8_throughput_ratio"] > 0
    assert "gateway over gRPC: c1 p50" in capsys.readouterr().out


@pytest.mark.integration
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="--pin puts the gateway on a core of its own")
def test_the_pinned_gateway_bench_gives_the_gateway_its_own_core(tiny_pipeline, tmp_path, monkeypatch):
    import benchmarks.gateway as bench
    from ernie_deploy.evaluate.inputs import ModelInputs

    pinned: list[tuple[int, int]] = []
    pin_group = bench._pin_group
    monkeypatch.setattr(bench, "_pin_group", lambda pgid, core: (pinned.append((pgid, core)), pin_group(pgid, core)))
    p = tiny_pipeline
    item = ModelInputs(p.static.spec, p.onnx, p.static, ["国足公布世预赛名单", "股市大涨"] * 10)
    before = os.sched_getaffinity(0)
    record = bench.run_gateway([item], tmp_path, rounds=1, duration_s=0.3, warmup_s=0.1, peer=False, pin=True)
    assert record["pinned"] and (tmp_path / "gateway-pinned.json").exists()
    (server, own), *gateways = pinned  # the server's threads, then each gateway's (merging, and merging none)
    assert own == min(before) and len(gateways) == 2
    assert all(core == max(before) and pgid != server for pgid, core in gateways)
    assert os.sched_getaffinity(0) == before  # this process's cores given back
