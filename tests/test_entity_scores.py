"""Entity scores: the mean, over an entity's tokens, of the softmax probability of the tag the decoding chose
(serving.entity_scores), under both decodings, from merged window logits, on the native wire, the Hugging Face
route and SimpleServing's, and equal between the served model and the Paddle and ONNX references."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ernie_deploy.serving.entities import DECODINGS, batch_entities, entities_from_json, entities_to_json, label_ids
from ernie_deploy.serving.entity_scores import (
    SCORE_TOLERANCE,
    chosen_probabilities,
    same_entities,
    score_differences,
    without_scores,
)

from .conftest import MSRA_LABELS

LABELS = MSRA_LABELS
ID = {tag: i for i, tag in enumerate(LABELS)}


def _softmax(row: np.ndarray) -> np.ndarray:
    e = np.exp(row - row.max())
    return e / e.sum()


def _one_char_offsets(length: int) -> np.ndarray:
    """[CLS] (0, 0), one character per token, [SEP] (0, 0)."""
    offsets = np.zeros((length, 2), np.int64)
    for i in range(1, length - 1):
        offsets[i] = (i - 1, i)
    return offsets


def _hand_logits() -> np.ndarray:
    """张三说李四: argmax tags I-PER I-PER O B-LOC I-LOC, with B-PER a close second on 张 (constrained picks it)."""
    rows = [
        {"O": 5.0},  # [CLS]
        {"I-PER": 3.0, "B-PER": 2.5},
        {"I-PER": 4.0, "O": 1.0},
        {"O": 3.0},
        {"B-LOC": 2.0, "O": 1.0},
        {"I-LOC": 1.0, "O": 0.5},
        {"O": 5.0},  # [SEP]
    ]
    logits = np.zeros((1, len(rows), len(LABELS)), np.float32)
    for t, row in enumerate(rows):
        for tag, value in row.items():
            logits[0, t, ID[tag]] = value
    return logits


@pytest.mark.parametrize("decoding", DECODINGS)
def test_the_score_is_the_mean_probability_of_the_chosen_tags(decoding):
    text, logits = "张三说李四", _hand_logits()
    p = np.array([_softmax(row.astype(np.float64)) for row in logits[0]])
    found = batch_entities([text], logits, np.array([7]), _one_char_offsets(7)[None], LABELS, decoding, scored=True)
    assert without_scores(found[0]) == [
        {"type": "PER", "start": 0, "end": 2, "text": "张三"},
        {"type": "LOC", "start": 3, "end": 5, "text": "李四"},
    ]
    # 张: constrained chose B-PER (an entity cannot open with I-), argmax its best, I-PER.
    first = "B-PER" if decoding == "constrained" else "I-PER"
    want = [(p[1, ID[first]] + p[2, ID["I-PER"]]) / 2, (p[4, ID["B-LOC"]] + p[5, ID["I-LOC"]]) / 2]
    got = [e["score"] for e in found[0]]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    assert all(0 < s <= 1 for s in got) and max(got) < 1
    if decoding == "constrained":  # the chosen tag's probability, not the best one's
        assert got[0] < (p[1, ID["I-PER"]] + p[2, ID["I-PER"]]) / 2 - 0.05


def test_unscored_decoding_answers_the_spans_alone():
    text, logits = "张三说李四", _hand_logits()
    found = batch_entities([text], logits, np.array([7]), _one_char_offsets(7)[None], LABELS)
    assert found[0] and all("score" not in e for e in found[0])


def test_a_score_stays_above_zero_when_the_chosen_tag_underflows():
    # One character whose best tag is I-PER by 2000: constrained opens the entity with B-PER, probability exp(-1999).
    logits = np.zeros((1, 3, len(LABELS)), np.float32)
    logits[0, :, ID["O"]] = -5.0
    logits[0, 1, ID["I-PER"]], logits[0, 1, ID["B-PER"]] = 2000.0, 1.0
    ids = label_ids(logits, np.array([3]), LABELS, "constrained")
    assert ids[0, 1] == ID["B-PER"] and chosen_probabilities(logits, ids)[0, 1] == 0.0
    (entity,) = batch_entities(["张"], logits, np.array([3]), _one_char_offsets(3)[None], LABELS, scored=True)[0]
    assert 0 < entity["score"] < 1e-300


def test_probabilities_do_not_overflow_on_large_logits():
    logits = np.array([[[1e4, 1e4 - 1.0, -1e4]]], np.float32)
    got = chosen_probabilities(logits, np.array([[0]]))
    np.testing.assert_allclose(got, [[1 / (1 + np.exp(-1.0))]], rtol=1e-12)


def _windowed_post(tmp_path, decoding):
    from ernie_deploy.kinds.token.serving import TokenClsPostprocess
    from ernie_deploy.serving.entities import DECODING_PARAMETER

    (tmp_path / "labels.json").write_text(json.dumps(LABELS))
    params = {DECODING_PARAMETER: {"string_value": decoding}, "long_text": {"string_value": "window"}}
    return TokenClsPostprocess({"parameters": params}, tmp_path)


@pytest.mark.parametrize("decoding", DECODINGS)
def test_a_windowed_text_is_scored_from_its_merged_logits(tmp_path, decoding):
    from ernie_deploy.serving.windows import deciding_window, merge_windows

    text, tokens = "张三李四王五", 6
    starts, ends = np.array([[0, 2]]), np.array([[4, 6]])  # windows of 4 tokens, overlapping on tokens 2 and 3
    rng = np.random.default_rng(5)
    logits = (rng.normal(size=(1, 2, 6, len(LABELS))) * 0.5).astype(np.float32)
    # One PER over the whole text in both windows, each window as sure as it happens to be.
    for w, start in enumerate(starts[0]):
        for k in range(4):
            logits[0, w, k + 1, ID["B-PER" if start + k == 0 else "I-PER"]] += 6.0 - 3.0 * w
    lengths = np.array([[tokens + 2]])
    post = _windowed_post(tmp_path, decoding)
    inputs = {
        "logits": logits,
        "text": np.array([[text.encode()]], dtype=np.object_),
        "window_starts": starts,
        "window_ends": ends,
        "text_offsets": _one_char_offsets(tokens + 2)[None],
        "text_lengths": lengths,
    }
    (entity,) = entities_from_json(post(inputs)["entities"][0, 0])
    assert without_scores(entity) == {"type": "PER", "start": 0, "end": 6, "text": text}
    merged = merge_windows(logits, starts, ends, lengths)[0].astype(np.float64)
    tags = ["B-PER"] + ["I-PER"] * 5
    want = np.mean([_softmax(merged[t + 1])[ID[tag]] for t, tag in enumerate(tags)])
    assert entity["score"] == pytest.approx(want, abs=1e-12)
    # The overlap is read from its deciding window: the other window's rows give another score.
    deciding = deciding_window(tokens, [0, 2], [4, 6])
    other = merged.copy()
    for t in (2, 3):
        w = 1 - int(deciding[t])
        other[t + 1] = logits[0, w, t - starts[0, w] + 1]
    wrong = np.mean([_softmax(other[t + 1])[ID[tag]] for t, tag in enumerate(tags)])
    assert abs(entity["score"] - wrong) > 1e-3


def test_the_wire_carries_scores_and_paddlenlps_keeps_its_shape():
    from ernie_deploy.kinds.token.client import read_paddlenlp_entities
    from ernie_deploy.kinds.token.serving import paddlenlp_entities

    text = "张三说李四"
    scored = [{"type": "PER", "start": 0, "end": 2, "text": "张三", "score": 0.75}]
    assert entities_from_json(entities_to_json(scored)) == scored
    # PaddleNLP's OUTPUT stays {"pos", "label"}: its clients' parser is not in the installed paddlenlp to check.
    written = paddlenlp_entities(entities_to_json(scored))
    assert json.loads(written) == [{"pos": [0, 1], "label": "PER"}]
    assert entities_from_json(read_paddlenlp_entities(written, text)) == without_scores(scored)
    for bad, problem in ((1.5, "not in"), (0.0, "not in"), (-0.1, "not in"), (True, "must be a number")):
        with pytest.raises(Exception, match=problem):
            entities_from_json(json.dumps([{**scored[0], "score": bad}]))


def test_the_hugging_face_route_answers_the_models_scores():
    from ernie_deploy.kinds.token.gateway import hugging_face, simple_serving

    entities = [
        [{"type": "PER", "start": 0, "end": 2, "text": "张三", "score": 0.8125}],
        [{"type": "LOC", "start": 3, "end": 5, "text": "李四"}],  # read from PaddleNLP's wire: no score
    ]
    answers = {"entities": np.array([entities_to_json(e) for e in entities], dtype=np.object_).reshape(-1, 1)}
    assert hugging_face(answers, None, {}) == [
        [{"entity_group": "PER", "score": 0.8125, "word": "张三", "start": 0, "end": 2}],
        [{"entity_group": "LOC", "score": 1.0, "word": "李四", "start": 3, "end": 5}],
    ]
    assert simple_serving(answers, None, {}) == {"entities": entities}


def test_same_entities_compares_spans_exactly_and_scores_within_the_tolerance():
    a = [[{"type": "PER", "start": 0, "end": 2, "text": "张三", "score": 0.5}]]
    near = [[{**a[0][0], "score": 0.5 + SCORE_TOLERANCE / 2}]]
    far = [[{**a[0][0], "score": 0.5 + SCORE_TOLERANCE * 2}]]
    moved = [[{**a[0][0], "end": 1, "text": "张", "score": 0.5}]]
    assert same_entities(a, near) and not same_entities(a, far) and not same_entities(a, moved)
    assert not same_entities(a, without_scores(a))  # a missing score is not a matching one
    assert score_differences([{"constrained": a[0]}], [{"constrained": near[0]}]) == [pytest.approx(5e-6)]


def test_a_real_model_scores_in_the_open_interval(tiny_token_pipeline):
    from ernie_deploy.evaluate.offline import onnx_predictions

    p = tiny_token_pipeline
    texts = ["国足公布世预赛名单", "中国美元亿新闻", "股市大涨 abc 中国", "体育教育科技社会" * 40]
    found = onnx_predictions(p.static.spec, p.onnx, p.static.vocab_file, texts)
    scores = [e["score"] for entities in found for e in entities]
    assert scores and all(0 < s <= 1 for s in scores)
    assert min(scores) < 0.99, "a random model is not sure of its tags"


# ---------------------------------------------------------------------------------------------------------------
# Served on a real Triton server: the bootstrap NER model


SENTENCE = "新华社北京电，国务院总理李鹏今天在人民大会堂会见了日本客人。"
SERVED_TEXTS = [SENTENCE, "张三2008年在上海 iPhone 店工作", SENTENCE * 8]  # the last read in several windows


@pytest.mark.integration
def test_served_scores_equal_paddle_and_onnx_and_every_route_answers_them(
    server, repository, token_cls_pipeline, tmp_path
):
    from ernie_deploy.client.grpc_client import Client
    from ernie_deploy.evaluate.offline import onnx_predictions, paddle_predictions
    from ernie_deploy.gateway.process import GatewayProcess
    from ernie_deploy.repository.served import served_models

    (record,) = [m for m in served_models(repository).values() if m.kind == "token"]
    with Client(record.task_spec, server.grpc_url, model=record) as client:
        served = client.predict(SERVED_TEXTS, progress=False)
    p = token_cls_pipeline
    onnx = onnx_predictions(record, p.onnx, p.static.vocab_file, SERVED_TEXTS)
    paddle = paddle_predictions(record, p.static, SERVED_TEXTS)
    assert without_scores(served) == without_scores(onnx) == without_scores(paddle)
    scores = [e["score"] for entities in served for e in entities]
    assert len(scores) >= 3 and all(0 < s <= 1 for s in scores) and min(scores) < 1.0, scores
    against_paddle, against_onnx = score_differences(served, paddle), score_differences(served, onnx)
    print(
        f"{len(scores)} entities, scores {min(scores):.4f}..{max(scores):.4f}; "
        f"max |served - paddle| {max(against_paddle):.2e}, max |served - onnx| {max(against_onnx):.2e}"
    )
    assert max(against_paddle) <= SCORE_TOLERANCE and max(against_onnx) <= SCORE_TOLERANCE

    gateway = GatewayProcess(repository, server.grpc_url, log_file=tmp_path / "gateway.log")
    with gateway.start(timeout=60):
        hf = _post(f"{gateway.url}/hf/{record.name}", {"inputs": SERVED_TEXTS})
        simple = _post(f"{gateway.url}/models/{record.name}", {"data": {"text": SERVED_TEXTS}, "parameters": {}})
    assert [[(a["entity_group"], a["word"], a["start"], a["end"]) for a in answer] for answer in hf] == [
        [(e["type"], e["text"], e["start"], e["end"]) for e in entities] for entities in served
    ]
    assert [a["score"] for answer in hf for a in answer] == scores
    assert simple == {"result": {"entities": served}}


def _post(url: str, body: dict):
    import urllib.request

    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=120) as response:
        assert response.status == 200
        return json.loads(response.read())
