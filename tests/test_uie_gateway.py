"""Extraction (UIE) through the HTTP gateway and the client script, on a real tritonserver and a real gateway process:
SimpleServing's taskflow route (`POST /taskflow/<model>`, as PaddleNLP's UIE serving examples call it) answers what
the model answers over gRPC for the schema sent, or for the one it was built with; bad bodies, a model built without
a schema and a model of another kind are refused by name, and the gateway answers afterwards;
clients/uie_grpc_client.py prints the same answers, and scores a split."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from ernie_deploy.kinds.uie.evaluate import ENTITY_PROMPTS, score
from tests.conftest import artifacts

from .test_spans import ENTITY_SCHEMA, RELATION_SCHEMA, TEXTS, biased_uie

pytestmark = pytest.mark.integration

NAME = "uie_gw"  # built with --schema ENTITY_SCHEMA
BARE = "uie_gw_bare"  # the same checkpoint, built without a schema
SEQ = "news_gw"  # a classifier: no schema, no taskflow route
MAX_BODY = 20_000
ROOT = Path(__file__).resolve().parents[1]
# MSRA's tags for TEXTS (one per character), and the prompts its types are scored under.
GOLD = [
    ["B-PER", "I-PER", "O", "B-LOC", "I-LOC", "O", "B-ORG", "I-ORG", "I-ORG", "I-ORG", *["O"] * 6],
    ["B-PER", "I-PER", *["O"] * 7, "B-ORG", "I-ORG", "I-ORG", "I-ORG", "O", "O", "O", "O", "B-LOC", "I-LOC", "O"],
]
PROMPTS = list(ENTITY_PROMPTS.values())


@pytest.fixture(scope="module")
def stack(tmp_path_factory, tiny_pipeline):
    """(tritonserver, gateway, work folder): the UIE checkpoint exported, converted and built twice with the
    commands users run, and a classifier, served by one tritonserver behind one gateway."""
    from ernie_deploy.cli import main
    from ernie_deploy.gateway.process import GatewayProcess
    from ernie_deploy.repository.build import build
    from ernie_deploy.repository.options import BuildOptions
    from ernie_deploy.server.process import TritonServer

    work = tmp_path_factory.mktemp("uie_gateway")
    names = (*ENTITY_SCHEMA, *RELATION_SCHEMA["人物"], "的", *PROMPTS)
    biased_uie(work / "checkpoint", texts=TEXTS, names=names)
    repo = work / "models"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ERNIE_DEPLOY_ARTIFACTS", str(work / "artifacts"))
        schema = json.dumps(ENTITY_SCHEMA, ensure_ascii=False)
        for name, extra in ((NAME, ["--schema", schema]), (BARE, [])):
            assert main(["export", "--task", "uie", "--model", name, "--checkpoint", str(work / "checkpoint")]) == 0
            assert main(["convert", "--model", name]) == 0
            assert main(["build", "--model", name, "-r", str(repo), "--runtime", "python", *extra]) == 0
    build(artifacts(tiny_pipeline, SEQ), repo, BuildOptions(runtime="python"))
    with TritonServer(repo, http_port=0, grpc_port=0, metrics_port=0, log_file=work / "server.log") as server:
        gateway = GatewayProcess(
            repo, server.grpc_url, args=["--max-body-bytes", str(MAX_BODY)], log_file=work / "gateway.log"
        )
        with gateway.start(timeout=60):
            yield server, gateway, work


def post(url: str, body) -> tuple[int, object]:
    """(status, JSON answer) of a POST; `body` is sent as JSON unless bytes."""
    data = body if isinstance(body, bytes) else json.dumps(body, ensure_ascii=False).encode()
    request = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def grpc(server, texts: list[str], schema=None, model: str = NAME) -> list[dict]:
    """The model's answers over gRPC, in plain tritonclient: the schema (as JSON) sent with each text, or none."""
    import tritonclient.grpc as grpcclient

    def tensor(name: str, values: list[str]):
        array = np.array([v.encode("utf-8") for v in values], dtype=np.object_).reshape(-1, 1)
        out = grpcclient.InferInput(name, list(array.shape), "BYTES")
        out.set_data_from_numpy(array)
        return out

    inputs = [tensor("text", texts)]
    if schema is not None:
        inputs.append(tensor("schema", [json.dumps(schema, ensure_ascii=False)] * len(texts)))
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        result = client.infer(model, inputs, outputs=[grpcclient.InferRequestedOutput("result")])
    finally:
        client.close()
    return [json.loads(item) for item in result.as_numpy("result").reshape(-1)]


@pytest.mark.parametrize("schema", [ENTITY_SCHEMA, RELATION_SCHEMA], ids=["entities", "relations"])
def test_the_taskflow_route_answers_what_the_model_answers_over_grpc(stack, schema):
    server, gateway, _ = stack
    status, answer = post(f"{gateway.url}/taskflow/{NAME}", {"data": {"text": TEXTS}, "parameters": {"schema": schema}})
    expected = grpc(server, TEXTS, schema)
    assert status == 200 and answer == {"result": expected}
    assert sum(len(spans) for one in expected for spans in one.values()) >= 2, "nothing found: an empty comparison"
    if schema is RELATION_SCHEMA:
        assert any(span.get("relations") for one in expected for span in one.get("人物", []))
    # SimpleServing's model route and one text sent alone answer the same
    assert post(f"{gateway.url}/models/{NAME}", {"data": {"text": TEXTS}, "parameters": {"schema": schema}}) == (
        200,
        {"result": expected},
    )
    one = post(f"{gateway.url}/taskflow/{NAME}", {"data": {"text": TEXTS[1]}, "parameters": {"schema": schema}})
    assert one == (200, {"result": expected[1:]})


def test_without_a_schema_the_built_one_is_used(stack):
    server, gateway, _ = stack
    status, answer = post(f"{gateway.url}/taskflow/{NAME}", {"data": {"text": TEXTS}})
    assert status == 200 and answer == {"result": grpc(server, TEXTS)}
    assert answer["result"] == grpc(server, TEXTS, ENTITY_SCHEMA)
    assert all(set(one) <= set(ENTITY_SCHEMA) for one in answer["result"])
    # Hugging Face's route reads the same spans, as token classification answers them
    status, entities = post(f"{gateway.url}/hf/{NAME}", {"inputs": TEXTS[0]})
    spans = answer["result"][0]
    assert status == 200 and sorted((e["entity_group"], e["start"], e["end"]) for e in entities) == sorted(
        (kind, s["start"], s["end"]) for kind, found in spans.items() for s in found
    )


def test_a_model_built_without_a_schema_takes_one_per_request(stack):
    server, gateway, _ = stack
    status, answer = post(f"{gateway.url}/taskflow/{BARE}", {"data": {"text": TEXTS}})
    assert status == 400, answer
    detail = answer["detail"][0]
    assert detail["loc"] == ["body", "parameters", "schema"] and "built without one" in detail["msg"]
    assert "--schema" in detail["msg"] and "parameters.schema" in detail["msg"]
    body = {"data": {"text": TEXTS}, "parameters": {"schema": ["人物"]}}
    assert post(f"{gateway.url}/taskflow/{BARE}", body) == (200, {"result": grpc(server, TEXTS, ["人物"], BARE)})


# (model, body, status, words the message holds): each refused by name, in SimpleServing's error shape
BAD = [
    (NAME, {"data": {"text": TEXTS}, "parameters": {"schema": 42}}, 422, "not a name, list or dict"),
    (NAME, {"data": {"text": TEXTS}, "parameters": {"schema": {"人物": 5}}}, 422, "not a list or a name"),
    (NAME, {"data": {"text": TEXTS}, "parameters": {"schema": [""]}}, 422, "empty type"),
    (NAME, {"data": {"text": TEXTS}, "parameters": {"schema": []}}, 422, "names no type"),
    (NAME, {"data": {"text": [1]}}, 422, "text[0] is int"),
    (NAME, {"data": {"text": []}}, 422, "empty list"),
    (NAME, {"data": {"text": TEXTS, "text_pair": TEXTS}}, 422, "takes one text"),
    (NAME, {"data": {"text": ["a" * MAX_BODY]}}, 413, "max-body-bytes"),
    (NAME, b'{"data": {"text": ["a"]', 422, "not JSON"),
    (NAME, b'{"data": "\xff"}', 422, "not UTF-8"),
    (SEQ, {"data": {"text": TEXTS}, "parameters": {"schema": ["人物"]}}, 404, f"call POST /models/{SEQ}"),
    ("nosuch", {"data": {"text": TEXTS}}, 404, NAME),
]


@pytest.mark.parametrize("model, body, status, words", BAD, ids=[f"{s}-{w}" for _, _, s, w in BAD])
def test_bad_requests_are_refused_by_name(stack, model, body, status, words):
    server, gateway, _ = stack
    got, answer = post(f"{gateway.url}/taskflow/{model}", body)
    assert got == status, answer
    detail = answer["detail"]
    text = detail if isinstance(detail, str) else detail[0]["msg"]
    assert words in text and "fix:" in text and "Traceback" not in text
    assert post(f"{gateway.url}/taskflow/{NAME}", {"data": {"text": TEXTS[:1]}})[0] == 200  # still answering


def test_info_lists_the_taskflow_route_of_extraction_models_only(stack):
    _, gateway, _ = stack
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(f"{gateway.url}/info") as response:
        routes = {m["name"]: m["routes"] for m in json.loads(response.read())["models"]}
    assert routes[NAME]["taskflow"] == f"/taskflow/{NAME}" and routes[BARE]["taskflow"] == f"/taskflow/{BARE}"
    assert "taskflow" not in routes[SEQ]


def client(server, *args: str) -> subprocess.CompletedProcess:
    script = [sys.executable, str(ROOT / "clients" / "uie_grpc_client.py"), "--grpc-url", server.grpc_url]
    return subprocess.run([*script, *args], capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_the_client_script_prints_each_texts_answer(stack):
    server, _, _ = stack
    texts = [arg for text in TEXTS for arg in ("--text", text)]
    run = client(server, "--model", NAME, *texts)
    assert run.returncode == 0, run.stderr
    assert [json.loads(line) for line in run.stdout.splitlines()[1::2]] == grpc(server, TEXTS)
    assert run.stdout.splitlines()[::2] == TEXTS
    schema = json.dumps(RELATION_SCHEMA, ensure_ascii=False)
    run = client(server, "--model", NAME, *texts, "--schema", schema)
    assert run.returncode == 0, run.stderr
    assert [json.loads(line) for line in run.stdout.splitlines()[1::2]] == grpc(server, TEXTS, RELATION_SCHEMA)
    run = client(server, "--model", NAME, *texts, "--schema", '[""]')
    assert run.returncode == 2 and "empty type" in run.stderr and "Traceback" not in run.stderr
    run = client(server, "--model", SEQ, "--text", TEXTS[0])
    assert run.returncode == 2 and "this client reads uie answers" in run.stderr


def test_the_client_script_scores_a_split(stack):
    server, _, work = stack
    split = work / "split.jsonl"
    split.write_text(
        "".join(json.dumps({"text": t, "labels": g}, ensure_ascii=False) + "\n" for t, g in zip(TEXTS, GOLD)),
        encoding="utf-8",
    )
    report = work / "report.json"
    schema = json.dumps(PROMPTS, ensure_ascii=False)
    run = client(server, "--model", BARE, "--data", str(split), "--schema", schema, "--report", str(report))
    assert run.returncode == 0, run.stderr
    expected = score(TEXTS, GOLD, grpc(server, TEXTS, PROMPTS, BARE), PROMPTS)
    assert run.stdout.splitlines()[-1] == f"span_f1: {expected['span_f1']:.4f} (n=2)"
    assert json.loads(report.read_text()) == expected
