"""TEI's `/tokenize` on the gateway (`POST /hf/<model>/tokenize`), a real gateway process over a real repository
built from the tiny classifier in two layouts: the tokens are those the served tokenizer.json gives the model (the
tokenizer step's own encoding), their offsets cut the text back into them, [CLS] and [SEP] are marked special and
left out on request, and over-limit or malformed bodies are refused by name in TEI's error shape.

The route reads the model's tokenizer.json and never asks Triton, so the gateway runs here without a tritonserver
(its gRPC address names a port nothing listens on)."""

from __future__ import annotations

import json
import unicodedata

import pytest

from tests.conftest import artifacts
from tests.test_gateway import _get, _post

pytestmark = pytest.mark.integration

SHARED = "news"  # the ensemble layout: the shared tokenizer step holds the tokenizer.json
FUSED = "news_fused"  # the fused layout: the model's own version folder holds it
MAX_TEXT, MAX_REQUEST = 40, 100  # SHARED's limits
TEXTS = [
    "国足公布世预赛名单",
    "Apple's iPhone15 售价 ¥5999，Café  résumé!",
    "ABC 123 新闻\t財經",  # 財經: characters the tiny vocabulary lacks, each an [UNK]
    "",
]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory, tiny_pipeline):
    """(gateway, repository)."""
    from ernie_deploy.gateway.process import GatewayProcess
    from ernie_deploy.repository.build import build
    from ernie_deploy.repository.options import BuildOptions
    from ernie_deploy.server.preflight import free_ports

    work = tmp_path_factory.mktemp("gateway_tokenize")
    repo = work / "models"
    limits = {"max_text_chars": MAX_TEXT, "max_request_chars": MAX_REQUEST}
    build(artifacts(tiny_pipeline, SHARED), repo, BuildOptions(runtime="python", layout="ensemble", **limits))
    build(artifacts(tiny_pipeline, FUSED), repo, BuildOptions(runtime="python", layout="fused"))
    nowhere = f"127.0.0.1:{free_ports(1)[0]}"
    with GatewayProcess(repo, nowhere, log_file=work / "gateway.log").start(timeout=60, ready=False) as process:
        yield process, repo


def _served_tokenizer(repo, name: str):
    """The tokenizer.json the model is served with, where the build writes it for the model's layout."""
    from ernie_deploy.serving.tokenizer import load_tokenizer

    path = repo / ("ernie_tokenizer" if name == SHARED else name) / "1" / "tokenizer.json"
    assert path.is_file(), f"no tokenizer.json at {path}"
    return load_tokenizer(path)


def _normalized(text: str) -> str:
    """The text as the tokenizer reads it (lowercased, accents stripped, whitespace gone): what a token spells."""
    text = unicodedata.normalize("NFD", text.lower())
    return "".join(ch for ch in text if unicodedata.category(ch) != "Mn" and not ch.isspace())


def _tokenize(gateway, name: str, body) -> tuple[int, object]:
    process, _ = gateway
    status, _, answer = _post(f"{process.url}/hf/{name}/tokenize", body)
    return status, answer


@pytest.mark.parametrize("name", [SHARED, FUSED])
def test_offsets_cut_the_text_back_into_the_served_tokens(gateway, name):
    from ernie_deploy.serving.encoding import encode_batch
    from ernie_deploy.serving.tokenizer import CLS, SEP, UNK

    _, repo = gateway
    tokenizer = _served_tokenizer(repo, name)
    vocab = tokenizer.get_vocab()
    status, answer = _tokenize(gateway, name, {"inputs": TEXTS})
    assert status == 200 and len(answer) == len(TEXTS)
    unknown = 0
    for text, tokens in zip(TEXTS, answer):
        served = encode_batch(tokenizer, [text], max_seq_len=4 * len(text) + 2)  # the tokenizer step's encoding
        assert [t["id"] for t in tokens] == served.input_ids[0].tolist()
        for token, special in ((tokens[0], CLS), (tokens[-1], SEP)):
            want = {"id": tokenizer.token_to_id(special), "text": special, "special": True, "start": None, "stop": None}
            assert token == want
        inner = tokens[1:-1]
        assert [[t["start"], t["stop"]] for t in inner] == served.offsets[0, 1:-1].tolist()
        end = 0
        for token in inner:
            start, stop = token["start"], token["stop"]
            assert not token["special"] and end <= start < stop <= len(text)
            assert text[start:stop] == token["text"]
            piece = tokenizer.id_to_token(token["id"])
            if piece == UNK:
                unknown += 1
                assert _normalized(token["text"]) not in vocab
            else:
                assert _normalized(token["text"]) == piece.removeprefix("##")
            end = stop
        # Every character of the text that spells something lies in a token.
        covered = "".join(t["text"] for t in inner)
        assert _normalized(covered) == _normalized("".join(ch for ch in text if not ch.isspace()))
    assert unknown >= 4  # ' 售 价 ¥ ， 財 經 ...: each [UNK] spans what it stands for


def test_special_tokens_are_left_out_on_request(gateway):
    status, marked = _tokenize(gateway, SHARED, {"inputs": TEXTS[1]})
    assert status == 200 and len(marked) == 1  # one text: a list of one list, as TEI answers it
    status, plain = _tokenize(gateway, SHARED, {"inputs": TEXTS[1], "add_special_tokens": False})
    assert status == 200 and plain == [marked[0][1:-1]]
    assert not any(t["special"] for t in plain[0])
    status, empty = _tokenize(gateway, SHARED, {"inputs": [""], "add_special_tokens": False})
    assert status == 200 and empty == [[]]


def test_a_text_longer_than_the_model_reads_is_tokenized_whole(gateway):
    from ernie_deploy.repository.served import served_model

    _, repo = gateway
    max_seq_len = served_model(repo, FUSED).max_seq_len
    text = "国足公布世预赛名单" * (max_seq_len // 9 + 2)
    status, answer = _tokenize(gateway, FUSED, {"inputs": text})
    assert status == 200 and len(answer[0]) == len(text) + 2 > max_seq_len


def test_a_lone_surrogate_is_answered_in_place(gateway):
    process, _ = gateway
    status, _, answer = _post(f"{process.url}/hf/{SHARED}/tokenize", b'{"inputs": "ab\\ud800cd \\u4e2d"}')
    assert status == 200
    assert [(t["start"], t["stop"]) for t in answer[0][1:-1]][-1] == (6, 7)
    assert answer[0][-2]["text"] == "中"


def test_over_limit_texts_and_requests_are_refused_by_name(gateway):
    status, answer = _tokenize(gateway, SHARED, {"inputs": ["短", "国" * (MAX_TEXT + 1)]})
    assert status == 413 and answer["error_type"] == "validation"
    assert "inputs[1]" in answer["error"] and "max_text_chars" in answer["error"]
    assert f"{MAX_TEXT + 1:,} characters" in answer["error"] and "--max-text-chars" in answer["error"]
    status, answer = _tokenize(gateway, SHARED, {"inputs": ["国" * MAX_TEXT] * 3})
    assert status == 413 and "max_request_chars" in answer["error"] and "--max-request-chars" in answer["error"]
    status, answer = _tokenize(gateway, SHARED, {"inputs": ["国" * MAX_TEXT] * 2})
    assert status == 200 and [len(tokens) for tokens in answer] == [MAX_TEXT + 2] * 2


@pytest.mark.parametrize(
    "body, status, words",
    [
        (b"{not json", 422, ["not JSON"]),
        ({"text": "a"}, 422, ["no inputs"]),
        ({"inputs": 5}, 422, ["inputs is 5"]),
        ({"inputs": ["a", 5]}, 422, ["inputs[1] is 5", "strings only"]),
        ({"inputs": [["a", "b"]]}, 422, ["inputs[0]", "not pairs", "input of its own"]),
        ({"inputs": []}, 400, ["empty list", "at least one"]),
        ({"inputs": "a", "add_special_tokens": "no"}, 422, ["add_special_tokens", "true or false"]),
        ({"inputs": "a", "prompt_name": "query"}, 422, ["prompt_name", "no prompts"]),
    ],
)
def test_a_malformed_body_is_refused_by_name(gateway, body, status, words):
    got, answer = _tokenize(gateway, SHARED, body)
    assert got == status, answer
    assert set(answer) == {"error", "error_type"} and "; fix: " in answer["error"]
    for word in words:
        assert word in answer["error"]


def test_an_unknown_model_is_a_404_and_the_route_is_listed_and_counted(gateway):
    process, _ = gateway
    status, answer = _tokenize(gateway, "nope", {"inputs": "a"})
    assert status == 404 and answer["error_type"] == "not_found" and SHARED in answer["error"]
    status, info = _get(f"{process.url}/info")
    routes = {m["name"]: m["routes"] for m in json.loads(info)["models"]}
    assert routes[SHARED]["tei_tokenize"] == f"/hf/{SHARED}/tokenize"
    _, metrics = _get(f"{process.url}/metrics")
    ok = [line for line in metrics.splitlines() if 'route="/hf/{model}/tokenize"' in line and 'status="200"' in line]
    assert any(line.startswith("ernie_gateway_requests_total") and float(line.split()[-1]) >= 1 for line in ok)
