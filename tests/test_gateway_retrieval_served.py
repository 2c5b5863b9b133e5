"""The gateway's retrieval routes on a real tritonserver serving the retrieval repository (tests/retrieval_fixtures.py:
a RocketQA tower `ernie_embed`, a cross-encoder `ernie_rerank`, the neural-search recipe's `recipe_embed` normalized
in its graph, a raw-logit `raw_rerank`), through a gateway process over real HTTP: the `openai` package's client and
huggingface_hub's InferenceClient unchanged, TEI's embed, similarity and rerank bodies, and their refusals, each
answer checked against another route's answer of the same model."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from tests.test_gateway import _get, _post

pytestmark = pytest.mark.integration

EMB, RANK, RECIPE, RAW = "ernie_embed", "ernie_rerank", "recipe_embed", "raw_rerank"
TEXTS = ["上海明天的天气怎么样", "如何申请护照", "北京有哪些大学", "手机电池不耐用怎么办"]
QUERY = "北京有哪些大学"
PASSAGES = [
    "上海市气象台预报明天多云转晴，最高气温二十三度。",
    "北京大学和清华大学都位于北京市海淀区。",
    "办理护照需要携带身份证到户籍所在地的出入境管理部门。",
    "昨晚火箭队主场以一百零二比九十八击败湖人队。",
]


@pytest.fixture
def gateway(retrieval_gateway):
    return retrieval_gateway


def _raw(gateway, model: str, texts: list[str]) -> np.ndarray:
    """The model's vectors as it pools them: TEI's /embed with normalize false."""
    status, _, vectors = _post(f"{gateway.url}/hf/{model}/embed", {"inputs": texts, "normalize": False})
    assert status == 200, vectors
    return np.array(vectors, dtype=np.float32)


def _unit(vectors: np.ndarray) -> np.ndarray:
    wide = vectors.astype(np.float64)
    return wide / np.linalg.norm(wide, axis=-1, keepdims=True)


def test_the_openai_client_gets_unit_vectors_in_both_formats(gateway):
    import openai

    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0)
    expected = _unit(_raw(gateway, EMB, TEXTS))
    assert not np.allclose(np.linalg.norm(_raw(gateway, EMB, TEXTS), axis=-1), 1.0)  # a tower answers no unit vectors
    default = client.embeddings.create(model=EMB, input=TEXTS)  # the client asks base64 and decodes it
    floats = client.embeddings.create(model=EMB, input=TEXTS, encoding_format="float")
    encoded = client.embeddings.create(model=EMB, input=TEXTS, encoding_format="base64")
    decoded = [np.frombuffer(base64.b64decode(item.embedding), dtype="<f4") for item in encoded.data]
    for answer in (default.data, floats.data):
        assert [item.index for item in answer] == list(range(len(TEXTS)))
        vectors = np.array([item.embedding for item in answer])
        assert np.allclose(np.linalg.norm(vectors, axis=-1), 1.0, atol=1e-6)
        assert np.allclose(vectors, expected, atol=1e-6)
    assert np.array_equal(np.array(decoded), np.array([item.embedding for item in floats.data], dtype=np.float32))
    # The tokens read: each text's whole tokenization, [CLS] and [SEP] included (TEI's /tokenize of the same model).
    status, _, tokens = _post(f"{gateway.url}/hf/{EMB}/tokenize", {"inputs": TEXTS})
    assert status == 200 and floats.usage.prompt_tokens == floats.usage.total_tokens == sum(map(len, tokens))
    assert floats.model == EMB and floats.object == "list"
    one = client.embeddings.create(model=EMB, input=TEXTS[0], encoding_format="float")
    assert len(one.data) == 1 and np.allclose(one.data[0].embedding, expected[0], atol=1e-6)


def test_the_openai_client_reads_each_refusal(gateway):
    import openai

    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0)
    dim = len(_raw(gateway, EMB, TEXTS[:1])[0])
    assert len(client.embeddings.create(model=EMB, input=TEXTS[0], dimensions=dim).data[0].embedding) == dim
    with pytest.raises(openai.BadRequestError, match=f"dimensions is {dim - 1}") as refused:
        client.embeddings.create(model=EMB, input=TEXTS[0], dimensions=dim - 1)
    assert refused.value.body["param"] == "dimensions"
    with pytest.raises(openai.BadRequestError, match="token ids"):
        client.embeddings.create(model=EMB, input=[[101, 2769, 102]])
    with pytest.raises(openai.BadRequestError, match="33 texts, over this gateway's limit of 32") as refused:
        client.embeddings.create(model=EMB, input=[TEXTS[0]] * 33)
    assert "--max-client-batch-size" in refused.value.message
    with pytest.raises(openai.BadRequestError, match="input\\[1\\] is longer than the 128 tokens"):
        client.embeddings.create(model=EMB, input=[TEXTS[0], "上海" * 200])
    with pytest.raises(openai.NotFoundError) as missing:
        client.embeddings.create(model="nosuch", input="a")
    assert missing.value.body["code"] == "model_not_found" and EMB in missing.value.message
    with pytest.raises(openai.BadRequestError, match="not an embedding"):
        client.embeddings.create(model=RANK, input="a")
    assert {EMB, RANK, RECIPE, RAW} <= {model.id for model in client.models.list()}
    assert client.models.retrieve(EMB).owned_by == "ernie-deploy"


def test_inference_client_feature_extraction_and_sentence_similarity(gateway):
    from huggingface_hub import InferenceClient

    client = InferenceClient(model=f"{gateway.url}/hf/{EMB}")
    raw = _raw(gateway, EMB, TEXTS)
    vectors = client.feature_extraction(TEXTS[0])
    assert vectors.shape == (1, raw.shape[1]) and np.allclose(vectors[0], _unit(raw)[0], atol=1e-6)
    assert np.array_equal(client.feature_extraction(TEXTS[0], normalize=False)[0], raw[0])
    cosines = client.sentence_similarity(TEXTS[0], other_sentences=TEXTS[1:])
    units = _unit(raw)
    assert cosines == pytest.approx((units[1:] @ units[0]).tolist(), abs=1e-6)
    body = {"inputs": {"source_sentence": TEXTS[0], "sentences": TEXTS[1:]}}
    status, _, tei = _post(f"{gateway.url}/hf/{EMB}/similarity", body)
    assert status == 200 and tei == pytest.approx(cosines, abs=1e-7)


def test_tei_embed_normalizes_refuses_a_long_text_and_truncates_on_request(gateway):
    raw = _raw(gateway, EMB, TEXTS)
    status, _, units = _post(f"{gateway.url}/hf/{EMB}/embed", {"inputs": TEXTS})
    assert status == 200 and np.allclose(units, _unit(raw), atol=1e-6)
    status, _, one = _post(f"{gateway.url}/hf/{EMB}/embed", {"inputs": TEXTS[0]})
    assert status == 200 and len(one) == 1 and np.allclose(one[0], units[0], atol=1e-7)  # TEI: a list of one
    # The recipe's graph normalizes: its vectors are unit length as the checkpoint pools them.
    assert np.allclose(np.linalg.norm(_raw(gateway, RECIPE, TEXTS), axis=-1), 1.0, atol=1e-5)

    long = "上海" * 200  # 400 tokens, past max_seq_len 128
    status, _, refused = _post(f"{gateway.url}/hf/{EMB}/embed", {"inputs": [TEXTS[0], long]})
    assert status == 413 and refused["error_type"] == "validation"
    assert "inputs[1]" in refused["error"] and "128 tokens" in refused["error"] and "truncate: true" in refused["error"]
    status, _, cut = _post(f"{gateway.url}/hf/{EMB}/embed", {"inputs": [long], "truncate": True, "normalize": False})
    head = _raw(gateway, EMB, [long[:126]])  # what the model reads of it: the first 126 tokens and [CLS], [SEP]
    assert status == 200 and np.allclose(cut, head, atol=1e-5)
    status, _, left = _post(f"{gateway.url}/hf/{EMB}/embed", {"inputs": long, "truncation_direction": "Left"})
    assert status == 422 and '"Left"' in left["error"] and "Right" in left["error"]
    status, _, many = _post(f"{gateway.url}/hf/{EMB}/embed", {"inputs": [TEXTS[0]] * 33})
    assert status == 413 and "--max-client-batch-size" in many["error"]
    status, _, wrong = _post(f"{gateway.url}/hf/{RANK}/embed", {"inputs": TEXTS[0]})
    assert status == 424 and f"/hf/{RANK}/rerank" in wrong["error"]


def test_tei_rerank_ranks_best_first_by_the_models_scores(gateway):
    body = {"query": QUERY, "texts": PASSAGES}
    status, _, ranks = _post(f"{gateway.url}/hf/{RANK}/rerank", {**body, "return_text": True})
    assert status == 200 and sorted(r["index"] for r in ranks) == list(range(len(PASSAGES)))
    scores = [r["score"] for r in ranks]
    assert scores == sorted(scores, reverse=True) and all(0 < s < 1 for s in scores)
    assert all(r["text"] == PASSAGES[r["index"]] for r in ranks)
    # The same pairs on the Hugging Face route: the model's score of each, in the order sent.
    status, _, pairs = _post(f"{gateway.url}/hf/{RANK}", {"inputs": [[QUERY, text] for text in PASSAGES]})
    by_index = {r["index"]: r["score"] for r in ranks}
    assert status == 200 and [p[0]["score"] for p in pairs] == pytest.approx([by_index[i] for i in range(4)], abs=1e-6)
    assert [r["index"] for r in ranks] == sorted(range(4), key=lambda i: -by_index[i])
    status, _, raw = _post(f"{gateway.url}/hf/{RANK}/rerank", {**body, "raw_scores": True})
    assert status == 200 and all("text" not in r for r in raw)
    assert [r["index"] for r in raw] == [r["index"] for r in ranks]  # the sigmoid keeps the order
    logits = {r["index"]: r["score"] for r in raw}
    assert [logits[i] for i in range(4)] == pytest.approx(
        [np.log(p / (1 - p)) for p in (by_index[i] for i in range(4))], abs=1e-4
    )
    # A model exported with --score raw answers its logit as its score.
    status, _, own = _post(f"{gateway.url}/hf/{RAW}/rerank", body)
    status_raw, _, asked = _post(f"{gateway.url}/hf/{RAW}/rerank", {**body, "raw_scores": True})
    assert status == status_raw == 200 and own == asked
    status, _, cut = _post(f"{gateway.url}/hf/{RANK}/rerank", {"query": QUERY, "texts": ["上海" * 200]})
    assert status == 413 and "query with texts[0]" in cut["error"]
    status, _, kept = _post(
        f"{gateway.url}/hf/{RANK}/rerank", {"query": QUERY, "texts": ["上海" * 200], "truncate": True}
    )
    assert status == 200 and len(kept) == 1
    status, _, many = _post(f"{gateway.url}/hf/{RANK}/rerank", {"query": QUERY, "texts": PASSAGES * 9})
    assert status == 413 and "36 texts" in many["error"]


def test_the_models_are_listed_with_their_retrieval_facts(gateway):
    status, body = _get(f"{gateway.url}/v1/models")
    listed = json.loads(body)
    assert status == 200 and listed["object"] == "list"
    assert all(m["object"] == "model" and m["created"] > 0 for m in listed["data"])
    info = json.loads(_get(f"{gateway.url}/info")[1])
    models = {m["name"]: m for m in info["models"]}
    assert info["max_client_batch_size"] == 32
    assert models[EMB]["dim"] == len(_raw(gateway, EMB, TEXTS[:1])[0]) and models[RECIPE]["normalized"] is True
    assert models[RANK]["scoring"] == "probability" and models[RAW]["scoring"] == "raw"
    assert models[EMB]["routes"]["tei_embed"] == f"/hf/{EMB}/embed" and "tei_rerank" in models[RANK]["routes"]
