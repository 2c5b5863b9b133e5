"""The offline references read a model as its record says: the windows of a windowed model (the record's, else
`ModelSpec.window_default`, half a window apart, cut as `serving.windows.recorded_cut` says), the head+tail cut of
a classifier, and nothing given beside the record."""

from __future__ import annotations

import json

import numpy as np

from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.core.tasks import SEQ_CLS, TOKEN_CLS
from ernie_deploy.serving import windows as W

from .conftest import MSRA_LABELS

LONG = ["国足公布世预赛名单" * 12, "股市大涨" * 30, "中国"]  # two texts longer than any window below, one shorter


def _record(**facts) -> ModelSpec:
    # trained on texts of 24 tokens: a record that names no window reads windows of 24 (ModelSpec.window_default)
    return ModelSpec.new(TOKEN_CLS, **{"labels": MSRA_LABELS, "max_seq_len": 64, "trained_tokens": 24, **facts})


def test_a_record_without_a_window_reads_the_window_default_and_the_default_stride_and_cut():
    from ernie_deploy.evaluate.offline import window_of

    assert window_of(_record()) == (24, W.default_stride(24), W.DEFAULT_CUT)
    assert window_of(_record(trained_tokens=None)) == (64, W.default_stride(64), W.DEFAULT_CUT)
    built = _record(long_text="window", window_size=40, window_stride=7, window_cut="sliding")
    assert window_of(built) == (40, 7, "sliding")
    # a record that reads windows but names no cut reads them cut as `build` cuts by default
    assert window_of(_record(long_text="window", window_size=40)).cut == W.recorded_cut(None) == W.DEFAULT_CUT


def test_window_predict_runs_windows_of_the_records_size():
    """No model: the run records the windows it is given. A record with window_size W runs windows of W tokens, one
    every default_stride(W); a record with none, windows of its window_default."""
    from ernie_deploy.evaluate.offline import window_predict

    def whole(batch):  # one token per character, as a CJK text tokenizes
        return [(list(range(5, 5 + len(t))), [(i, i + 1) for i in range(len(t))]) for t in batch]

    shapes: list[tuple[int, int]] = []

    def run(ids, types):
        shapes.append(ids.shape)
        return np.zeros((*ids.shape, len(MSRA_LABELS)), np.float32)

    text = "国" * 100  # no sentence end: one sentence longer than a window, read in sliding windows of its own
    for record, size in ((_record(window_size=32), 32), (_record(), 24)):
        shapes.clear()
        (entities,) = window_predict(record, [text], whole, run, (1, 2, 0))
        expected = W.window_starts(100, size - 2, W.default_stride(size))
        assert shapes == [(len(expected), size)] and entities == []


def test_offline_evaluation_reads_the_records_window(tiny_token_pipeline, tmp_path, monkeypatch):
    """`evaluate` of a windowed model: Paddle and ONNX both read the windows of the record it is given, or of its
    window_default where the record names none."""
    from ernie_deploy.evaluate import offline
    from ernie_deploy.evaluate.offline import evaluate

    p = tiny_token_pipeline
    split = tmp_path / "test.jsonl"
    rows = [json.dumps({"text": t, "labels": ["O"] * len(t)}, ensure_ascii=False) + "\n" for t in LONG]
    split.write_text("".join(rows), encoding="utf-8")
    seen: list[tuple[int, int]] = []
    windows_from_tokens = W.windows_from_tokens

    def spy(ids, offsets, size, stride, *args, **kwargs):
        seen.append((size + 2, stride))  # size: the real tokens of a window, [CLS] and [SEP] aside
        return windows_from_tokens(ids, offsets, size, stride, *args, **kwargs)

    # the offline reading cuts its windows with the function it imported (serving.windows.windows_from_tokens)
    monkeypatch.setattr(offline, "windows_from_tokens", spy)
    exported = p.static.spec.updated(trained_tokens=24)
    assert exported.window_size is None and exported.long_text is None  # as `export` writes it: no window yet
    for record, window in ((exported.updated(window_size=40), 40), (exported, 24)):
        seen.clear()
        scores = evaluate(record, p.static, p.onnx, split)
        # one batch of windows through Paddle, one through ONNX
        assert len(seen) == 2 and set(seen) == {(window, W.default_stride(window))}, seen
        assert set(scores["decodings"]) and scores["ner_decoding"] == (record.ner_decoding or "constrained")


def test_paddle_and_onnx_cut_a_head_tail_record_as_the_tokenizer_step(tiny_pipeline):
    from ernie_deploy.evaluate.offline import head_tokens, paddle_encoder
    from ernie_deploy.serving.encoding import encode_items
    from ernie_deploy.serving.tokenizer import build_tokenizer

    static = tiny_pipeline.static
    texts = ["国足公布世预赛名单" * 4, "股市大涨", "新闻 abc 财经 " * 6]
    record = static.spec.updated(max_seq_len=16, long_text="head_tail")
    assert head_tokens(record) == W.default_head_tokens(16) and head_tokens(record.updated(head_tokens=5)) == 5
    assert head_tokens(static.spec) is None  # a classifier's default reading keeps the head alone
    for model in (record, record.updated(head_tokens=5)):
        served = encode_items(build_tokenizer(static.vocab_file), texts, 16, head_tokens=head_tokens(model))
        paddle = paddle_encoder(model, static.vocab_file)(texts)
        assert paddle.input_ids.tolist() == served.input_ids.tolist()
        assert paddle.offsets.tolist() == served.offsets.tolist()
        assert paddle.truncated.tolist() == served.truncated.tolist() == [True, False, True]


def test_a_model_that_reads_no_windows_is_refused_them():
    import pytest

    from ernie_deploy.core.errors import ErnieDeployError
    from ernie_deploy.evaluate.offline import window_predict

    with pytest.raises(ErnieDeployError, match="does not read texts in windows"):
        window_predict(ModelSpec.new(SEQ_CLS, labels=("a", "b")), ["国足"], list, list, (1, 2, 0))
