"""The gateway's retrieval routes without a Triton server: TEI's embed, similarity and rerank bodies, OpenAI's
embeddings body and answer (base64 as the openai package decodes it), each contract's error shape, and the
--max-client-batch-size cap on every inference route. The app runs in process with a stand-in for its Triton
connection that answers as the embed and rerank models do (a vector, the tokens read and whether a text was cut;
a score and its logit), so that the `openai` and `huggingface_hub` clients are checked against it unchanged over
real HTTP; tests/test_gateway_retrieval_served.py does the same on a real tritonserver."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
import zlib

import numpy as np
import pytest

from ernie_deploy.core.errors import BadOptionsError, BadRequest
from ernie_deploy.core.settings import ServingSettings
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.core.tasks import EMBED, RERANK, SEQ_CLS
from ernie_deploy.gateway import openai as openai_route
from ernie_deploy.gateway import retrieval
from ernie_deploy.gateway.app import KIND_JSON, Gateway, GatewaySettings
from ernie_deploy.gateway.errors import GatewayError, openai_response
from ernie_deploy.gateway.models import ServedModel

DIM = 8
MAX_SEQ_LEN = 16  # a text of more than 14 characters is cut (the stand-in reads a character as a token)
LIMIT = 4  # --max-client-batch-size of the in-process gateway
EMB, RANK, CLS = "emb", "rank", "cls"


def _vector(text: str) -> np.ndarray:
    """The stand-in's vector of a text: fixed per text, not of length 1 (as a checkpoint pools it)."""
    return (np.random.default_rng(zlib.crc32(text.encode())).normal(size=DIM) * 3).astype(np.float32)


def _logit(query: str, text: str) -> float:
    """The stand-in's relevance: the more of the query's characters the text holds, the higher."""
    return float(sum(c in text for c in query)) - 1.5


class FakeTriton:
    """Answers as the served embed and rerank models do (gateway.triton.Triton.infer's outputs), counting calls."""

    def __init__(self):
        self.calls: list[tuple[str, int, tuple]] = []

    def open(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def ready(self, names):
        return {"server": True, **{name: True for name in names}}

    async def infer(self, model: ServedModel, items: list, asked=()) -> dict[str, np.ndarray]:
        self.calls.append((model.name, len(items), tuple(asked)))
        limit = model.record.max_seq_len
        if model.record.kind == "embed":
            tokens = np.array([[len(t) + 2] for t in items], dtype=np.int64)
            answers = {"embedding": np.stack([_vector(t) for t in items])}
        elif model.record.kind == "rerank":
            tokens = np.array([[len(q) + len(t) + 3] for q, t in items], dtype=np.int64)
            logits = np.array([[_logit(q, t)] for q, t in items], dtype=np.float32)
            answers = {"score": 1 / (1 + np.exp(-logits))}
            if "logits" in asked:
                answers["logits"] = logits
        else:
            tokens = np.array([[len(t) + 2] for t in items], dtype=np.int64)
            answers = {
                "label": np.array([[b"a"]] * len(items), dtype=np.object_),
                "confidence": np.full((len(items), 1), 0.9, np.float32),
            }
        answers["lengths"] = np.minimum(tokens, limit)
        answers["truncated"] = tokens > limit
        return answers


def _records() -> dict[str, ServedModel]:
    serving = ServingSettings()
    return {
        EMB: ServedModel(ModelSpec.new(EMBED, EMB, max_seq_len=MAX_SEQ_LEN, dim=DIM, serving=serving)),
        RANK: ServedModel(ModelSpec.new(RERANK, RANK, max_seq_len=MAX_SEQ_LEN, serving=serving)),
        CLS: ServedModel(ModelSpec.new(SEQ_CLS, CLS, labels=("a", "b"), serving=serving)),
    }


def _gateway(tmp_path, limit: int = LIMIT) -> Gateway:
    gateway = Gateway(GatewaySettings(repository=tmp_path, max_client_batch_size=limit))
    gateway.triton = FakeTriton()
    gateway.models.models = _records()

    async def reread():  # the stand-in models are not on disk: an unknown name finds nothing new
        pass

    gateway.models.reread = reread
    return gateway


@pytest.fixture
def client(tmp_path):
    from starlette.testclient import TestClient

    gateway = _gateway(tmp_path)
    with TestClient(gateway.app()) as test_client:
        test_client.gateway = gateway
        yield test_client


def _unit(vector: np.ndarray) -> np.ndarray:
    return (vector.astype(np.float64) / np.linalg.norm(vector.astype(np.float64))).astype(np.float32)


# -- TEI's bodies ----------------------------------------------------------------------------------------------------
def test_an_embed_body_takes_a_text_or_a_list_and_teis_defaults():
    assert retrieval.embed({"inputs": "a"}, LIMIT) == retrieval.Embed(["a"], normalize=True, truncate=False)
    asked = retrieval.embed({"inputs": ["a", "b"], "normalize": False, "truncate": True, "other": 1}, LIMIT)
    assert asked == retrieval.Embed(["a", "b"], normalize=False, truncate=True)
    assert retrieval.embed({"inputs": "a", "truncation_direction": "Right", "prompt_name": None}, LIMIT).texts == ["a"]


# (body, status, words the message holds)
BAD_EMBED = [
    ({"inputs": "a", "truncation_direction": "Left"}, 422, 'truncation_direction is "Left"'),
    ({"inputs": "a", "truncation_direction": "up"}, 422, '"Left" or "Right"'),
    ({"inputs": "a", "prompt_name": "query"}, 422, "no prompts"),
    ({"inputs": "a", "normalize": "yes"}, 422, "normalize is"),
    ({"inputs": "a", "truncate": 1}, 422, "truncate is 1"),
    ({"inputs": [101, 2769, 102]}, 422, "token ids"),
    ({"inputs": ["a", [101, 102]]}, 422, "inputs[1] is a list of token ids"),
    ({"inputs": ["a", 5]}, 422, "inputs[1] is 5"),
    ({"inputs": []}, 400, "empty"),
    ({"texts": ["a"]}, 422, "no inputs"),
    ({"inputs": "a", "parameters": {"normalize": False}}, 422, "top level"),
    (["a"], 422, "JSON list"),
    ({"inputs": ["a"] * (LIMIT + 1)}, 413, f"{LIMIT + 1} texts, over this gateway's limit of {LIMIT}"),
]


@pytest.mark.parametrize("body, status, words", BAD_EMBED, ids=[w for _, _, w in BAD_EMBED])
def test_a_bad_embed_body_is_refused_by_name(body, status, words):
    with pytest.raises(GatewayError) as refused:
        retrieval.embed(body, LIMIT)
    assert refused.value.status == status and words in refused.value.message
    assert "; fix: " in refused.value.message


def test_left_truncation_is_refused_with_its_fix():
    with pytest.raises(GatewayError) as refused:
        retrieval.embed({"inputs": "a", "truncation_direction": "Left"}, LIMIT)
    assert 'send "Right" or leave it out' in refused.value.message and refused.value.loc[-1] == "truncation_direction"


def test_a_similarity_body_counts_its_source_sentence():
    body = {"inputs": {"source_sentence": "s", "sentences": ["a", "b"]}, "parameters": {"truncate": True}}
    assert retrieval.is_similarity(body) and not retrieval.is_similarity({"inputs": "a"})
    asked = retrieval.similarity(body, LIMIT)
    assert asked.texts == ["s", "a", "b"] and asked.truncate
    full = {"inputs": {"source_sentence": "s", "sentences": ["a"] * LIMIT}}
    with pytest.raises(GatewayError, match=f"are {LIMIT + 1} texts") as refused:
        retrieval.similarity(full, LIMIT)
    assert refused.value.status == 413
    with pytest.raises(GatewayError) as empty:
        retrieval.similarity({"inputs": {"source_sentence": "s", "sentences": []}}, LIMIT)
    assert empty.value.status == 400 and empty.value.error_type == "empty"
    with pytest.raises(GatewayError, match="source_sentence is 5"):
        retrieval.similarity({"inputs": {"source_sentence": 5, "sentences": ["a"]}}, LIMIT)
    with pytest.raises(GatewayError, match="Left"):
        retrieval.similarity({**full, "parameters": {"truncation_direction": "Left"}}, LIMIT + 1)


def test_a_rerank_body_and_its_cap():
    asked = retrieval.rerank({"query": "q", "texts": ["a", "b"], "raw_scores": True, "return_text": True}, LIMIT)
    assert asked == retrieval.Rerank("q", ["a", "b"], raw_scores=True, return_text=True, truncate=False)
    for body, words in [
        ({"texts": ["a"]}, "no query"),
        ({"query": "q"}, "no texts"),
        ({"query": "q", "texts": "a"}, "texts is"),
        ({"query": "q", "texts": ["a"], "return_text": "no"}, "return_text is"),
        ({"query": "q", "texts": ["a"] * (LIMIT + 1)}, "--max-client-batch-size"),
    ]:
        with pytest.raises(GatewayError, match=words):
            retrieval.rerank(body, LIMIT)


def test_ranks_are_best_first_ties_in_order_with_text_on_request():
    asked = retrieval.Rerank("q", ["a", "b", "c"], raw_scores=False, return_text=True, truncate=False)
    ranks = retrieval.ranks(np.array([[0.2], [0.9], [0.2]], np.float32), asked)
    assert [(r["index"], r["text"]) for r in ranks] == [(1, "b"), (0, "a"), (2, "c")]
    assert ranks[0]["score"] == pytest.approx(0.9)
    plain = retrieval.ranks(np.array([0.1, 0.3]), retrieval.Rerank("q", ["a", "b"], False, False, False))
    assert plain == [{"index": 1, "score": pytest.approx(0.3)}, {"index": 0, "score": pytest.approx(0.1)}]
    with pytest.raises(GatewayError, match="NaN"):
        retrieval.ranks(np.array([np.nan]), plain and retrieval.Rerank("q", ["a"], False, False, False))


def test_cosines_are_the_source_against_each_sentence():
    vectors = np.array([[1, 0], [2, 0], [0, 3], [-1, 1], [0, 0]], np.float32)
    assert retrieval.cosines(vectors) == pytest.approx([1.0, 0.0, -(2**-0.5), 0.0])


def test_a_cut_text_is_refused_by_index_with_the_models_limit():
    model = _records()[EMB]
    answers = {"truncated": np.array([[False], [True], [True]])}
    with pytest.raises(GatewayError) as refused:
        retrieval.refuse_truncated(answers, model, lambda i: f"inputs[{i}]", retrieval.truncate_fix(MAX_SEQ_LEN))
    message = refused.value.message
    assert refused.value.status == 413 and "inputs[1]" in message and f"{MAX_SEQ_LEN} tokens" in message
    assert "truncate: true" in message
    retrieval.refuse_truncated({"truncated": np.array([[False]])}, model, str, "unused")  # nothing cut: no refusal


def test_a_model_of_another_kind_is_refused_naming_its_routes():
    models = _records()
    retrieval.require(models[EMB], retrieval.EMBED, "/hf/{model}/embed")
    with pytest.raises(GatewayError) as refused:
        retrieval.require(models[RANK], retrieval.EMBED, "/hf/{model}/embed")
    assert refused.value.status == 424 and f"/hf/{RANK}/rerank" in refused.value.message
    with pytest.raises(GatewayError, match=f"/hf/{EMB}/embed"):
        retrieval.require(models[EMB], retrieval.RERANK, "/hf/{model}/rerank")


# -- the kinds' JSON -------------------------------------------------------------------------------------------------
def test_embed_json_normalizes_unless_asked_not_to():
    model = _records()[EMB].record
    raw = np.stack([_vector("a"), np.zeros(DIM, np.float32)])
    answers = {"embedding": raw}
    units = np.array(KIND_JSON["embed"].hugging_face(answers, model, {}))
    assert np.linalg.norm(units[0]) == pytest.approx(1.0, abs=1e-6) and not units[1].any()  # a zero vector stays 0
    assert KIND_JSON["embed"].hugging_face(answers, model, {"normalize": False}) == raw.tolist()
    assert KIND_JSON["embed"].simple_serving(answers, model, {}) == {"embedding": raw.tolist()}
    with pytest.raises(BadRequest, match="normalize"):
        KIND_JSON["embed"].hugging_face(answers, model, {"normalize": "no"})


def test_rerank_json_under_each_function():
    model = _records()[RANK].record
    logits = np.array([[2.0], [-1.0]], np.float32)
    answers = {"score": 1 / (1 + np.exp(-logits)), "logits": logits}
    rerank = KIND_JSON["rerank"]
    assert rerank.asks({}) == () and rerank.asks({"function_to_apply": "none"}) == ("logits",)
    own = rerank.hugging_face(answers, model, {})
    assert [a[0]["score"] for a in own] == pytest.approx(answers["score"].reshape(-1).tolist())
    raw = rerank.hugging_face(answers, model, {"function_to_apply": "none", "top_k": 10**9})
    assert [a[0] for a in raw] == [{"label": "relevant", "score": 2.0}, {"label": "relevant", "score": -1.0}]
    with pytest.raises(BadRequest, match="softmax over one label"):
        rerank.hugging_face(answers, model, {"function_to_apply": "softmax"})
    assert rerank.simple_serving(answers, model, {})["score"] == pytest.approx(answers["score"].reshape(-1).tolist())


# -- OpenAI's body, answer and errors --------------------------------------------------------------------------------
def test_an_openai_body_and_its_defaults():
    asked = openai_route.parse({"model": EMB, "input": "a", "user": "someone"}, LIMIT)
    assert asked == openai_route.EmbeddingsRequest(EMB, ["a"], "float", None)
    asked = openai_route.parse({"model": EMB, "input": ["a", "b"], "encoding_format": "base64", "dimensions": 8}, 4)
    assert asked.texts == ["a", "b"] and asked.encoding_format == "base64" and asked.dimensions == 8


BAD_OPENAI = [
    ({"model": EMB, "input": [1, 2, 3]}, "input", "input is a list of token ids"),
    ({"model": EMB, "input": [[1, 2], [3]]}, "input", "input[0] is a list of token ids"),
    ({"model": EMB, "input": []}, "input", "empty list"),
    ({"model": EMB, "input": ["a", ""]}, "input", "input[1] is an empty string"),
    ({"model": EMB, "input": 5}, "input", "input is 5"),
    ({"model": EMB}, "input", "no input"),
    ({"input": "a"}, "model", "names no model"),
    ({"model": EMB, "input": "a", "encoding_format": "int8"}, "encoding_format", "'float', 'base64'"),
    ({"model": EMB, "input": "a", "dimensions": 0}, "dimensions", "dimensions is 0"),
    ({"model": EMB, "input": "a", "truncate": True}, "truncate", "unrecognized field 'truncate'"),
    ({"model": EMB, "input": ["a"] * (LIMIT + 1)}, "input", "--max-client-batch-size"),
]


@pytest.mark.parametrize("body, param, words", BAD_OPENAI, ids=[w for _, _, w in BAD_OPENAI])
def test_a_bad_openai_body_is_a_400_naming_its_field(body, param, words):
    with pytest.raises(GatewayError) as refused:
        openai_route.parse(body, LIMIT)
    response = openai_response(refused.value)
    error = json.loads(response.body)["error"]
    assert response.status_code == 400 and words in error["message"] and "; fix: " in error["message"]
    assert error["param"] == param and error["type"] == "invalid_request_error" and error["code"] == "validation"


def test_dimensions_other_than_the_models_are_refused():
    openai_route.check_dimensions(None, DIM, EMB)
    openai_route.check_dimensions(DIM, DIM, EMB)
    openai_route.check_dimensions(4, None, EMB)  # not known before an answer: checked against the answer's size
    with pytest.raises(GatewayError, match=f"answers vectors of {DIM} dimensions, which it does not shorten"):
        openai_route.check_dimensions(4, DIM, EMB)


def test_base64_is_little_endian_float32_as_the_openai_package_decodes_it():
    vectors = np.stack([_unit(_vector("a")), _unit(_vector("b"))])
    asked = openai_route.EmbeddingsRequest(EMB, ["a", "b"], "base64", None)
    body = openai_route.answer(asked, vectors, np.array([[3], [4]]))
    assert body["usage"] == {"prompt_tokens": 7, "total_tokens": 7} and body["model"] == EMB
    for i, item in enumerate(body["data"]):
        assert item["object"] == "embedding" and item["index"] == i
        raw = base64.b64decode(item["embedding"])
        assert np.array_equal(np.frombuffer(raw, dtype="<f4"), vectors[i])  # what the client does with numpy
        import array

        assert array.array("f", raw).tolist() == vectors[i].tolist()  # and without numpy
    floats = openai_route.answer(openai_route.EmbeddingsRequest(EMB, ["a"], "float", None), vectors[:1], np.array([3]))
    assert floats["data"][0]["embedding"] == vectors[0].tolist()


def test_openai_error_shape_for_each_status():
    not_found = json.loads(openai_response(openai_route.not_found("nosuch", [EMB])).body)["error"]
    assert not_found["code"] == "model_not_found" and not_found["param"] == "model" and EMB in not_found["message"]
    down = GatewayError(503, "unhealthy", "model not ready", fix="wait")
    error = json.loads(openai_response(down).body)["error"]
    assert error == {
        "message": "model not ready; fix: wait",
        "type": "server_error",
        "param": None,
        "code": "unhealthy",
    }


def test_a_cap_below_one_is_refused_by_its_flag(tmp_path):
    with pytest.raises(BadOptionsError, match="--max-client-batch-size 0"):
        Gateway(GatewaySettings(repository=tmp_path, max_client_batch_size=0))


# -- the routes, in process ------------------------------------------------------------------------------------------
def test_every_inference_route_holds_a_request_to_the_cap(client):
    """LIMIT + 1 texts on every inference route: refused in its contract's shape, naming the limit and the flag, and
    Triton never asked."""
    many = [f"t{i}" for i in range(LIMIT + 1)]
    cases = [
        (f"/models/{CLS}", {"data": {"text": many}}, 413, "detail"),
        (f"/hf/{CLS}", {"inputs": many}, 413, "tei"),
        (f"/hf/{CLS}/predict", {"inputs": many}, 413, "tei"),
        (f"/hf/{CLS}/tokenize", {"inputs": many}, 413, "tei"),
        (f"/hf/{EMB}", {"inputs": many}, 413, "tei"),
        (f"/hf/{EMB}", {"inputs": {"source_sentence": "s", "sentences": many[1:]}}, 413, "tei"),
        (f"/hf/{EMB}/embed", {"inputs": many}, 413, "tei"),
        (f"/hf/{EMB}/similarity", {"inputs": {"source_sentence": "s", "sentences": many[1:]}}, 413, "tei"),
        (f"/hf/{RANK}/rerank", {"query": "q", "texts": many}, 413, "tei"),
        (f"/hf/{RANK}", {"inputs": [["q", t] for t in many]}, 413, "tei"),
        ("/v1/embeddings", {"model": EMB, "input": many}, 400, "openai"),
    ]
    for path, body, status, shape in cases:
        response = client.post(path, json=body)
        answer = response.json()
        assert response.status_code == status, (path, answer)
        if shape == "detail":
            message = answer["detail"]
        elif shape == "tei":
            message = answer["error"]
        else:
            message = answer["error"]["message"]
        assert f"limit of {LIMIT} per request (--max-client-batch-size)" in message, (path, message)
        if shape == "tei":
            assert answer["error_type"] == "validation"
    assert client.gateway.triton.calls == []
    assert client.post(f"/hf/{EMB}/embed", json={"inputs": many[:LIMIT]}).status_code == 200


def test_tei_embed_route(client):
    response = client.post(f"/hf/{EMB}/embed", json={"inputs": "hello"})
    assert response.status_code == 200
    (vector,) = response.json()  # one text: a list of its one vector, as TEI answers
    assert np.allclose(vector, _unit(_vector("hello")), atol=1e-7)
    raw = client.post(f"/hf/{EMB}/embed", json={"inputs": ["a", "b"], "normalize": False}).json()
    assert raw == [_vector("a").tolist(), _vector("b").tolist()]
    long = "x" * MAX_SEQ_LEN
    refused = client.post(f"/hf/{EMB}/embed", json={"inputs": ["a", long]})
    assert refused.status_code == 413 and refused.json()["error_type"] == "validation"
    assert "inputs[1]" in refused.json()["error"] and "truncate: true" in refused.json()["error"]
    assert client.post(f"/hf/{EMB}/embed", json={"inputs": ["a", long], "truncate": True}).status_code == 200
    wrong = client.post(f"/hf/{RANK}/embed", json={"inputs": "a"})
    assert wrong.status_code == 424 and wrong.json()["error_type"] == "backend"
    predict = client.post(f"/hf/{EMB}/predict", json={"inputs": "a"})
    assert predict.status_code == 424 and f"/hf/{EMB}/embed" in predict.json()["error"]


def test_tei_similarity_and_rerank_routes(client):
    body = {"inputs": {"source_sentence": "北京大学", "sentences": ["北京", "上海", "北京大学"]}}
    for path in (f"/hf/{EMB}/similarity", f"/hf/{EMB}"):
        response = client.post(path, json=body)
        assert response.status_code == 200
        source = _unit(_vector("北京大学"))
        expected = [float(_unit(_vector(s)) @ source) for s in body["inputs"]["sentences"]]
        assert response.json() == pytest.approx(expected, abs=1e-6) and response.json()[2] == pytest.approx(1.0)
    long = {"inputs": {"source_sentence": "y" * MAX_SEQ_LEN, "sentences": ["a"]}}
    refused = client.post(f"/hf/{EMB}/similarity", json=long)
    assert refused.status_code == 413 and "inputs.source_sentence" in refused.json()["error"]
    assert client.post(f"/hf/{EMB}/similarity", json={**long, "parameters": {"truncate": True}}).status_code == 200

    texts = ["上海天气", "北京大学在海淀", "北京"]
    ranks = client.post(f"/hf/{RANK}/rerank", json={"query": "北京大学", "texts": texts, "return_text": True}).json()
    assert [r["index"] for r in ranks] == [1, 2, 0] and [r["text"] for r in ranks] == [texts[1], texts[2], texts[0]]
    assert [r["score"] for r in ranks] == sorted((r["score"] for r in ranks), reverse=True)
    assert all(0 < r["score"] < 1 for r in ranks)
    raw = client.post(f"/hf/{RANK}/rerank", json={"query": "北京大学", "texts": texts, "raw_scores": True}).json()
    assert [r["score"] for r in raw] == pytest.approx([_logit("北京大学", texts[i]) for i in (1, 2, 0)])
    assert all("text" not in r for r in raw)
    assert client.gateway.triton.calls[-1] == (RANK, 3, ("logits",))  # the logit asked only for raw_scores
    assert client.gateway.triton.calls[-2] == (RANK, 3, ())
    cut = client.post(f"/hf/{RANK}/rerank", json={"query": "q", "texts": ["z" * MAX_SEQ_LEN]})
    assert cut.status_code == 413 and "query with texts[0]" in cut.json()["error"]


def test_openai_routes(client):
    response = client.post("/v1/embeddings", json={"model": EMB, "input": ["a", "bb"]})
    body = response.json()
    assert response.status_code == 200 and body["object"] == "list" and body["model"] == EMB
    assert body["usage"] == {"prompt_tokens": 3 + 4, "total_tokens": 7}
    assert [item["embedding"] for item in body["data"]] == [_unit(_vector("a")).tolist(), _unit(_vector("bb")).tolist()]
    unknown = client.post("/v1/embeddings", json={"model": "nosuch", "input": "a"})
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"
    other = client.post("/v1/embeddings", json={"model": CLS, "input": "a"})
    assert (
        other.status_code == 400
        and other.json()["error"]["param"] == "model"
        and EMB in other.json()["error"]["message"]
    )
    long = client.post("/v1/embeddings", json={"model": EMB, "input": ["a", "q" * MAX_SEQ_LEN]})
    assert long.status_code == 400 and "input[1]" in long.json()["error"]["message"]
    listed = client.get("/v1/models").json()
    assert listed["object"] == "list" and {m["id"] for m in listed["data"]} == {EMB, RANK, CLS}
    assert all(m["object"] == "model" and isinstance(m["created"], int) and m["owned_by"] for m in listed["data"])
    assert client.get(f"/v1/models/{EMB}").json()["id"] == EMB
    assert client.get("/v1/models/nosuch").status_code == 404
    info = client.get("/info").json()
    assert info["max_client_batch_size"] == LIMIT
    models = {m["name"]: m for m in info["models"]}
    assert models[EMB]["routes"]["tei_embed"] == f"/hf/{EMB}/embed" and "tei_predict" not in models[EMB]["routes"]
    assert models[EMB]["dim"] == DIM and models[RANK]["routes"]["tei_rerank"] == f"/hf/{RANK}/rerank"
    assert models[RANK]["scoring"] == "probability"
    metrics = client.get("/metrics").text
    assert 'ernie_gateway_requests_total{route="/v1/embeddings",status="200"}' in metrics


# -- the clients, unchanged, over real HTTP --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The in-process gateway under uvicorn on a free port (the stand-in Triton behind it)."""
    import uvicorn

    from ernie_deploy.server.preflight import free_ports

    gateway = _gateway(tmp_path_factory.mktemp("retrieval"))
    (port,) = free_ports(1, "127.0.0.1")
    server = uvicorn.Server(uvicorn.Config(gateway.app(), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


def test_the_openai_client_reads_both_formats(served):
    import openai

    client = openai.OpenAI(base_url=f"{served}/v1", api_key="unused", max_retries=0)
    expected = [_unit(_vector(t)) for t in ("a", "bb")]
    default = client.embeddings.create(model=EMB, input=["a", "bb"])  # the client asks base64 and decodes it
    assert [d.embedding for d in default.data] == [e.tolist() for e in expected]  # bit for bit
    floats = client.embeddings.create(model=EMB, input="a", encoding_format="float", dimensions=DIM)
    assert floats.data[0].embedding == expected[0].tolist() and floats.usage.prompt_tokens == 3
    encoded = client.embeddings.create(model=EMB, input="a", encoding_format="base64")
    assert np.array_equal(np.frombuffer(base64.b64decode(encoded.data[0].embedding), "<f4"), expected[0])
    with pytest.raises(openai.BadRequestError, match="does not shorten"):
        client.embeddings.create(model=EMB, input="a", dimensions=DIM // 2)
    with pytest.raises(openai.BadRequestError, match="token ids"):
        client.embeddings.create(model=EMB, input=[[101, 102]])
    with pytest.raises(openai.NotFoundError, match="nosuch"):
        client.embeddings.create(model="nosuch", input="a")
    assert {m.id for m in client.models.list()} == {EMB, RANK, CLS}


def test_inference_client_feature_extraction_and_similarity(served):
    from huggingface_hub import InferenceClient

    client = InferenceClient(model=f"{served}/hf/{EMB}")
    vectors = client.feature_extraction("hello")
    assert vectors.shape == (1, DIM) and np.allclose(vectors[0], _unit(_vector("hello")), atol=1e-7)
    assert np.array_equal(client.feature_extraction("hello", normalize=False)[0], _vector("hello"))
    cosines = client.sentence_similarity("a", other_sentences=["a", "b"])
    assert cosines == pytest.approx([1.0, float(_unit(_vector("a")) @ _unit(_vector("b")))], abs=1e-6)


def test_tokenize_counts_texts_before_reading_its_tokenizer(tmp_path):
    """The cap holds on /tokenize before the tokenizer file is looked for (none exists here)."""
    gateway = _gateway(tmp_path, limit=2)
    model = gateway.models.models[CLS]
    with pytest.raises(GatewayError, match="limit of 2"):
        asyncio.run(gateway.tokenizers.answer(model, {"inputs": ["a", "b", "c"]}, 2))
