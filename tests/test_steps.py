"""The serving steps as plain objects: what each python model does, without a server."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.kinds.sequence.serving import SeqClsPostprocess
from ernie_deploy.kinds.token.serving import TokenClsPostprocess
from ernie_deploy.serving.model_steps import OnnxStep
from ernie_deploy.serving.texts import decode_texts
from tests.conftest import tokenizer_step


def _texts(*items):
    return np.array([t if isinstance(t, bytes) else t.encode("utf-8") for t in items], dtype=np.object_).reshape(-1, 1)


def _step_files(pipeline, folder):
    """What `build` puts in the version folders of a pipeline's python models, all in one folder."""
    from ernie_deploy.serving.tokenizer import save_tokenizer

    save_tokenizer(pipeline.static.vocab_file, folder / "tokenizer.json")
    (folder / "labels.json").write_text(json.dumps(pipeline.static.labels))
    (folder / "model.onnx").write_bytes(pipeline.onnx.read_bytes())
    return folder


@pytest.fixture
def step_dirs(tiny_pipeline, tmp_path):
    return _step_files(tiny_pipeline, tmp_path)


def test_tokenizer_onnx_postprocess_chain(step_dirs, tiny_pipeline):
    tokenizer = tokenizer_step({"parameters": {"max_seq_len": {"string_value": "16"}}}, step_dirs)
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
    tokenizer = tokenizer_step({"parameters": {"max_seq_len": {"string_value": "16"}}}, step_dirs)
    assert tokenizer({"text": _texts("国" * 500)})["input_ids"].shape == (1, 16)


@pytest.mark.parametrize(
    "bad, message",
    [
        (_texts(""), "text 0 is empty"),
        (_texts("ok", "   "), "text 1 is empty"),
        (_texts(b"\xff\xfe"), "not valid UTF-8"),
        (np.array([[1.0]], dtype=np.float32), "expected BYTES"),
    ],
)
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
    from ernie_deploy.serving.entities import entities_from_json

    tokenizer = tokenizer_step({"parameters": {"max_seq_len": {"string_value": "16"}}}, token_step_dirs)
    model, post = OnnxStep({}, token_step_dirs), TokenClsPostprocess({}, token_step_dirs)
    texts = _texts("国足公布世预赛名单", "中国 abc123 股市大涨" * 5)
    tokens = tokenizer({"text": texts})
    assert tokens["offsets"].shape == (*tokens["input_ids"].shape, 2) and tokens["truncated"][:, 0].tolist() == [
        False,
        True,
    ]
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
        assert all(text[e["start"] : e["end"]] == e["text"] and e["type"] == "PER" for e in found)
        assert max(e["end"] for e in found) <= len(text)


def test_token_postprocess_rejects_logits_that_do_not_fit(token_step_dirs):
    post = TokenClsPostprocess({}, token_step_dirs)
    with pytest.raises(ErnieDeployError, match="expected \\[batch, tokens, 7\\]"):
        post(
            {
                "logits": np.zeros((1, 3), np.float32),
                "text": _texts("中国"),
                "offsets": np.zeros((1, 3, 2), np.int64),
                "lengths": np.array([[3]], np.int64),
            }
        )


def _one_by_one_and_merged(step, requests):
    alone = [step.run_requests([r])[0] for r in requests]
    return alone, step.run_requests(requests)


def test_requests_of_different_lengths_run_as_one_batch_with_the_same_answers(step_dirs):
    config = {"parameters": {"max_seq_len": {"string_value": "16"}}}
    tokenizer = tokenizer_step(config, step_dirs)
    model, post = OnnxStep({}, step_dirs), SeqClsPostprocess({}, step_dirs)
    requests = [
        {"text": _texts("国足")},
        {"text": _texts("股市大涨 abc123 新闻", "中国")},
        {"text": _texts("美元" * 20)},
    ]
    alone, merged = _one_by_one_and_merged(tokenizer, requests)
    for a, m in zip(alone, merged):  # each request keeps its own width, whatever it was batched with
        assert a.keys() == m.keys() and all(np.array_equal(a[k], m[k]) for k in a)
    assert [m["input_ids"].shape[1] for m in merged] == [4, 14, 16]
    calls = []
    run = model.model.session.run
    model.model.session.run = lambda *a, **k: calls.append(a[1]["input_ids"].shape) or run(*a, **k)
    logits = model.run_requests(merged)
    assert calls == [(4, 16)], "the merged requests must reach onnxruntime as one padded batch"
    for m, out in zip(merged, logits):
        np.testing.assert_allclose(out["logits"], model(m)["logits"], atol=1e-5)
    labels = post.run_requests(logits)
    assert [len(o["label"]) for o in labels] == [1, 2, 1]
    assert [o["label_id"][:, 0].tolist() for o in labels] == [post(o)["label_id"][:, 0].tolist() for o in logits]


def test_a_bad_request_fails_alone_and_keeps_its_place(step_dirs):
    tokenizer = tokenizer_step({}, step_dirs)
    results = tokenizer.run_requests([{"text": _texts("国足")}, {"text": _texts("ok", " ")}, {"text": _texts("中国")}])
    assert isinstance(results[1], ErnieDeployError) and "text 1 is empty" in str(results[1])
    assert results[0]["input_ids"].shape == (1, 4) and results[2]["input_ids"].shape == (1, 4)
    model = OnnxStep({}, step_dirs)
    bad = {"input_ids": np.ones((1, 4), np.int32), "token_type_ids": np.zeros((1, 4), np.int32)}
    out = model.run_requests([results[0], bad, results[2]])
    assert isinstance(out[1], ErnieDeployError) and out[0]["logits"].shape == out[2]["logits"].shape == (1, 10)


def test_tokenizer_pads_to_max_seq_len_when_asked(step_dirs):
    config = {"parameters": {"max_seq_len": {"string_value": "16"}, "pad_to_multiple_of": {"string_value": "16"}}}
    out = tokenizer_step(config, step_dirs)({"text": _texts("国足", "股市")})
    assert out["input_ids"].shape == (2, 16) and out["lengths"][:, 0].tolist() == [4, 4]


def test_tokenizer_pads_each_request_to_its_length_bucket(step_dirs):
    config = {"parameters": {"max_seq_len": {"string_value": "20"}, "pad_to_multiple_of": {"string_value": "8"}}}
    out = tokenizer_step(config, step_dirs).run_requests(
        [{"text": _texts("国足")}, {"text": _texts("国" * 7)}, {"text": _texts("国" * 30)}]
    )
    assert [o["input_ids"].shape[1] for o in out] == [8, 16, 20]  # 4 -> 8, 9 -> 16, cut at 20 -> 20


def test_merged_token_logits_are_cut_back_to_each_request(token_step_dirs):
    tokenizer = tokenizer_step({"parameters": {"max_seq_len": {"string_value": "32"}}}, token_step_dirs)
    model = OnnxStep({}, token_step_dirs)
    tokens = tokenizer.run_requests([{"text": _texts("国足")}, {"text": _texts("中国 abc123 股市大涨" * 2)}])
    logits = model.run_requests(tokens)
    for t, out in zip(tokens, logits):
        assert out["logits"].shape == (*t["input_ids"].shape, 7)
        np.testing.assert_allclose(out["logits"], model(t)["logits"], atol=1e-5)


def _fused_config(pipeline):
    from google.protobuf.json_format import MessageToDict

    from ernie_deploy.repository.layouts import task_configs
    from ernie_deploy.repository.options import BuildOptions
    from ernie_deploy.repository.resolve import resolve_options

    # The head cut, as the three steps below run (the windowed fused model: tests/test_long_text.py).
    options = BuildOptions(runtime="python", layout="fused", long_text="head")
    (config,) = task_configs(resolve_options(pipeline.static.spec, options), pipeline.onnx)
    return MessageToDict(config, preserving_proto_field_name=True)


def test_every_task_names_a_postprocess_step_that_exists():
    from ernie_deploy.core.tasks import TASKS
    from ernie_deploy.serving.steps import STEPS

    for task in TASKS.values():
        assert task.postprocess in STEPS, f"task {task.name}: no step {task.postprocess!r} in STEPS"
        assert task.postprocess not in ("tokenizer", "onnx", "pipeline"), task.name


@pytest.mark.parametrize("which", ["seq_cls", "token_cls"])
def test_fused_pipeline_answers_what_the_three_steps_answer(which, request):
    from ernie_deploy.core.tasks import TASKS
    from ernie_deploy.serving.pipeline import PipelineStep
    from ernie_deploy.serving.steps import STEPS

    task = TASKS[which]
    pipeline = request.getfixturevalue("tiny_pipeline" if which == "seq_cls" else "tiny_token_pipeline")
    folder = request.getfixturevalue("step_dirs" if which == "seq_cls" else "token_step_dirs")
    fused = PipelineStep(_fused_config(pipeline), folder)
    config = {"parameters": {"max_seq_len": {"string_value": "128"}}}
    tokenizer, model = tokenizer_step(config, folder), OnnxStep({}, folder)
    post = STEPS[task.postprocess]({}, folder)
    requests = [
        {"text": _texts("国足公布世预赛名单")},
        {"text": _texts("")},
        {"text": _texts("股市大涨 abc", "中国" * 80)},
    ]
    results = fused.run_requests(requests)
    assert isinstance(results[1], ErnieDeployError)
    for request, got in zip(requests[::2], results[::2]):
        tokens = tokenizer(request)
        want = post({**tokens, **model(tokens), "text": request["text"]})
        want.update({o.name: tokens[o.name] for o in task.outputs if o.name in tokens})  # passed through
        assert sorted(got) == sorted(o.name for o in task.outputs)
        for name in want:
            assert np.array_equal(got[name], want[name]), name
    if which == "token_cls":
        assert results[2]["truncated"][:, 0].tolist() == [False, True]


def test_a_request_that_breaks_the_merged_run_fails_alone(step_dirs):
    model = OnnxStep({}, step_dirs)
    good = {"input_ids": np.array([[1, 5, 6, 2]], np.int64), "token_type_ids": np.zeros((1, 4), np.int64)}
    past_vocab = {"input_ids": np.array([[1, 10**6, 2]], np.int64), "token_type_ids": np.zeros((1, 3), np.int64)}
    out = model.run_requests([good, past_vocab, good])
    assert isinstance(out[1], ErnieDeployError) and "OnnxStep failed on this request" in str(out[1])
    np.testing.assert_allclose(out[0]["logits"], model(good)["logits"], atol=1e-6)
    np.testing.assert_allclose(out[2]["logits"], model(good)["logits"], atol=1e-6)


# ----------------------------------------------------------------------------------------------------
# The gates read what the server reads: parity, drift, calibration, evaluation and the bench tokenize with the
# tokenizer step's own code (serving.encoding.encode_items)

GATE_TEXTS = [
    "国足公布世预赛名单",  # fits
    "新闻 ABC 财经 iPhone15 " * 12,  # longer than max_seq_len: the served cut decides
    "a\x00b\x01c\x7fd\u200b中国\ufeff股市",  # control and format characters, which the tokenizer drops
    "股市\ud800大涨 abc",  # a lone surrogate (a file read with surrogateescape), which cannot cross into Rust
    "中国" * 7,  # exactly max_seq_len - 2 tokens: not cut
]
GATE_PAIRS = [
    ("国足公布", "美元 ABC"),
    ("股市" * 20, "中国"),  # the longer text gives way
    ("a\x00b\u200b中国", "新闻\ud800财经"),
    ("中国", "abc 财经" * 10),
]
ENCODED = ("input_ids", "token_type_ids", "offsets", "lengths", "truncated")


def _served_tokens(step, items):
    """What the tokenizer step answers for items (texts, or (text, text_pair) tuples) that passed its checks (a
    request's BYTES tensors decode to exactly such strs; a lone surrogate never comes from UTF-8)."""
    return step.run([items])[0]


def _assert_same_tokens(served, gate, max_seq_len):
    for name in ENCODED:
        want = getattr(gate, name)
        want = want.reshape(-1, 1) if want.ndim == 1 else want
        assert np.array_equal(served[name], want), name
    assert served["input_ids"].shape[1] <= max_seq_len


@pytest.mark.parametrize("items", [GATE_TEXTS, GATE_PAIRS], ids=["texts", "pairs"])
def test_the_gates_tokenize_exactly_as_the_tokenizer_step(items, step_dirs, tiny_pipeline):
    from ernie_deploy.export.drift import gate_batches

    inputs = [{"name": "text"}] + ([{"name": "text_pair"}] if isinstance(items[0], tuple) else [])
    step = tokenizer_step({"input": inputs, "parameters": {"max_seq_len": {"string_value": "16"}}}, step_dirs)
    served = _served_tokens(step, items)
    static = tiny_pipeline.static
    ((batch, gate),) = gate_batches(static.spec.updated(max_seq_len=16), static.vocab_file, items, 32)
    assert batch == items
    _assert_same_tokens(served, gate, 16)
    assert served["truncated"][:, 0].tolist() == (
        [False, True, False, False, False] if len(items) == 5 else [False, True, False, True]
    )
    # The surrogate is dropped as ErnieTokenizer drops it, leaving the characters around it where they were.
    row = 3 if isinstance(items[3], str) else 2
    dropped = items[row].replace("\ud800", "") if row == 3 else tuple(t.replace("\ud800", "") for t in items[row])
    alone = _served_tokens(step, [dropped])
    assert served["input_ids"][row, : int(served["lengths"][row, 0])].tolist() == alone["input_ids"][0].tolist()


def test_every_consumer_cuts_long_texts_as_the_tokenizer_step_does(step_dirs, tiny_pipeline):
    """Offline evaluation and the in-process bench call encode_items; the step's head+tail cut is encode_items' too."""
    from ernie_deploy.serving.encoding import encode_items
    from ernie_deploy.serving.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(step_dirs / "tokenizer.json")
    params = {"max_seq_len": {"string_value": "16"}, "head_tokens": {"string_value": "3"}}
    step = tokenizer_step({"parameters": params}, step_dirs)
    _assert_same_tokens(_served_tokens(step, GATE_TEXTS), encode_items(tokenizer, GATE_TEXTS, 16, head_tokens=3), 16)
    head_only = tokenizer_step({"parameters": {"max_seq_len": {"string_value": "16"}}}, step_dirs)
    _assert_same_tokens(_served_tokens(head_only, GATE_TEXTS), encode_items(tokenizer, GATE_TEXTS, 16), 16)


@pytest.mark.parametrize("lowercase", [True, False])
def test_the_gates_lowercase_as_the_served_tokenizer(lowercase, tiny_pipeline, tmp_path):
    """`build` makes the served tokenizer from vocab.txt alone, lowercasing as the tokenizer_config.json export
    writes beside it says; the gates lowercase by the do_lower_case export records with the model: the same."""
    from ernie_deploy.export.drift import gate_batches
    from ernie_deploy.serving.tokenizer import TOKENIZER_CONFIG, save_tokenizer

    model = tmp_path / "model"
    model.mkdir()
    (model / "vocab.txt").write_bytes(tiny_pipeline.static.vocab_file.read_bytes())
    (model / TOKENIZER_CONFIG).write_text(json.dumps({"do_lower_case": lowercase}))
    record = tiny_pipeline.static.spec.updated(max_seq_len=64, do_lower_case=lowercase)  # what the gates read
    save_tokenizer(model / "vocab.txt", tmp_path / "tokenizer.json")
    step = tokenizer_step({"parameters": {"max_seq_len": {"string_value": "64"}}}, tmp_path)
    texts = ["iPhone ABC 新闻", "iphone abc 新闻"]
    served = _served_tokens(step, texts)
    ((_, gate),) = gate_batches(record, model / "vocab.txt", texts, 32)
    _assert_same_tokens(served, gate, 64)
    upper, lower = served["input_ids"].tolist()
    assert (upper == lower) == lowercase  # "ABC" reads as "abc" only when the model lowercases
