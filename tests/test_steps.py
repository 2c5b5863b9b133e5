"""The serving steps as plain objects: what each python model does, without a server."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ernie_deploy.errors import ErnieDeployError
from ernie_deploy.steps import OnnxStep, SeqClsPostprocess, TokenClsPostprocess, TokenizerStep, decode_texts


def _texts(*items):
    return np.array([t if isinstance(t, bytes) else t.encode("utf-8") for t in items], dtype=np.object_).reshape(-1, 1)


def _step_files(pipeline, folder):
    """What `build` puts in the version folders of a pipeline's python models, all in one folder."""
    from ernie_deploy.tokenizer import save_tokenizer

    save_tokenizer(pipeline.static.vocab_file, folder / "tokenizer.json")
    (folder / "labels.json").write_text(json.dumps(pipeline.static.labels))
    (folder / "model.onnx").write_bytes(pipeline.onnx.read_bytes())
    return folder


@pytest.fixture
def step_dirs(tiny_pipeline, tmp_path):
    return _step_files(tiny_pipeline, tmp_path)


def test_tokenizer_onnx_postprocess_chain(step_dirs, tiny_pipeline):
    tokenizer = TokenizerStep({"parameters": {"max_seq_len": {"string_value": "16"}}}, step_dirs)
    model = OnnxStep({}, step_dirs)
    post = SeqClsPostprocess({}, step_dirs)
    ids = tokenizer({"text": _texts("国足公布世预赛名单", "股市大涨 abc123")})
    assert ids["input_ids"].dtype == np.int64 and ids["input_ids"].shape == ids["token_type_ids"].shape
    out = post(model(ids))
    assert out["label_id"].shape == (2, 1) and out["label"].shape == (2, 1) and out["confidence"].shape == (2, 1)
    labels = tiny_pipeline.static.labels
    assert [labels[i] for i in out["label_id"][:, 0]] == [b.decode() for b in out["label"][:, 0]]
    assert np.all((out["confidence"] > 0) & (out["confidence"] <= 1))


def test_long_text_is_truncated_to_max_seq_len(step_dirs):
    tokenizer = TokenizerStep({"parameters": {"max_seq_len": {"string_value": "16"}}}, step_dirs)
    assert tokenizer({"text": _texts("国" * 500)})["input_ids"].shape == (1, 16)


@pytest.mark.parametrize("bad, message", [
    (_texts(""), "text 0 is empty"),
    (_texts("ok", "   "), "text 1 is empty"),
    (_texts(b"\xff\xfe"), "not valid UTF-8"),
    (np.array([[1.0]], dtype=np.float32), "expected BYTES"),
])
def test_bad_text_is_named(bad, message):
    with pytest.raises(ErnieDeployError, match=message):
        decode_texts(bad)


def test_postprocess_rejects_labels_that_do_not_fit(step_dirs):
    post = SeqClsPostprocess({}, step_dirs)
    with pytest.raises(ErnieDeployError, match="3 classes but labels.json names 10"):
        post({"logits": np.zeros((1, 3), np.float32)})


def test_postprocess_is_a_softmax_argmax(step_dirs):
    post = SeqClsPostprocess({}, step_dirs)
    logits = np.log(np.array([[0.1] * 9 + [0.1], [0.05] * 9 + [0.55]], np.float32))
    logits[0, 3] = np.log(0.2)
    out = post({"logits": logits})
    assert out["label_id"][:, 0].tolist() == [3, 9]
    assert out["confidence"][1, 0] == pytest.approx(0.55, rel=1e-5)


def test_onnx_step_rejects_wrong_dtype(step_dirs):
    model = OnnxStep({}, step_dirs)
    with pytest.raises(ErnieDeployError, match="expected int64"):
        model({"input_ids": np.ones((1, 4), np.int32), "token_type_ids": np.zeros((1, 4), np.int64)})


@pytest.fixture
def token_step_dirs(tiny_token_pipeline, tmp_path):
    return _step_files(tiny_token_pipeline, tmp_path)


def test_token_cls_chain_returns_json_entities_inside_the_text(token_step_dirs):
    from ernie_deploy.entities import entities_from_json

    tokenizer = TokenizerStep({"parameters": {"max_seq_len": {"string_value": "16"}}}, token_step_dirs)
    model, post = OnnxStep({}, token_step_dirs), TokenClsPostprocess({}, token_step_dirs)
    texts = _texts("国足公布世预赛名单", "中国 abc123 股市大涨" * 5)
    tokens = tokenizer({"text": texts})
    assert tokens["offsets"].shape == (*tokens["input_ids"].shape, 2) and tokens["truncated"][:, 0].tolist() == [False, True]
    logits = model(tokens)["logits"]
    assert logits.shape == (*tokens["input_ids"].shape, 7)
    # A random model labels most tokens; force an entity through every real token to test the boundaries.
    forced = np.zeros_like(logits)
    forced[..., 3] = 1.0  # B-PER everywhere: one single-token entity per real token
    out = post({"logits": forced, "text": texts, "offsets": tokens["offsets"], "lengths": tokens["lengths"]})
    assert out["entities"].shape == (2, 1)
    for row, raw in enumerate(out["entities"][:, 0]):
        text = texts[row, 0].decode()
        found = entities_from_json(raw)
        assert len(found) == int(tokens["lengths"][row, 0]) - 2  # [CLS]/[SEP]/padding never become entities
        assert all(text[e["start"]:e["end"]] == e["text"] and e["type"] == "PER" for e in found)
        assert max(e["end"] for e in found) <= len(text)


def test_token_postprocess_rejects_logits_that_do_not_fit(token_step_dirs):
    post = TokenClsPostprocess({}, token_step_dirs)
    with pytest.raises(ErnieDeployError, match="expected \\[batch, tokens, 7\\]"):
        post({"logits": np.zeros((1, 3), np.float32), "text": _texts("中国"), "offsets": np.zeros((1, 3, 2), np.int64),
              "lengths": np.array([[3]], np.int64)})
