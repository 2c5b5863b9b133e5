"""Texts longer than the model's window: windows and their merge, the head+tail cut, the build options that choose
them, and the windowed model step on both runtimes (a tiny random model; the bootstrap model on a real server is in
tests/test_long_text_served.py)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from ernie_deploy.core.errors import BadRequest, ErnieDeployError
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.core.tasks import SEQ_CLS, TOKEN_CLS, WINDOW_INPUTS
from ernie_deploy.repository.build import build
from ernie_deploy.repository.configs import parse
from ernie_deploy.repository.layouts import task_configs
from ernie_deploy.repository.options import BuildOptions
from ernie_deploy.repository.resolve import resolve_options
from ernie_deploy.repository.tokenizers import tokenizer_steps
from ernie_deploy.serving import encoding
from ernie_deploy.serving import windows as W
from ernie_deploy.serving.tokenizer import CLS, SEP, build_tokenizer

from .conftest import MSRA_LABELS, artifacts

SEQ, TOKEN = ModelSpec.new(SEQ_CLS), ModelSpec.new(TOKEN_CLS)  # the demo models' records

# ----------------------------------------------------------------------------------------------------
# Windows


@pytest.mark.parametrize(
    ("tokens", "size", "stride", "starts"),
    [
        (0, 126, 63, [0]),  # an empty text: one (empty) window
        (126, 126, 63, [0]),  # exactly a window
        (127, 126, 63, [0, 1]),  # one token over: a second window, ending on the last token
        (300, 126, 63, [0, 63, 126, 174]),
        (252, 126, 126, [0, 126]),  # stride = window: no overlap, no gap
        (253, 126, 126, [0, 126, 127]),
        (5, 3, 1, [0, 1, 2]),
    ],
)
def test_windows_start_every_stride_and_the_last_ends_on_the_last_token(tokens, size, stride, starts):
    got = W.window_starts(tokens, size, stride)
    assert got == starts
    covered = set().union(*(range(s, min(s + size, tokens)) for s in got))
    assert covered == set(range(tokens))
    assert all(s + size <= max(tokens, size) for s in got)  # every window is full (or the text fits in one)


@pytest.mark.parametrize("stride", [0, -1, 127])
def test_a_stride_that_never_moves_or_skips_tokens_is_refused(stride):
    with pytest.raises(ErnieDeployError, match="stride"):
        W.window_starts(500, 126, stride)
    with pytest.raises(ErnieDeployError, match="--window-stride from 1 to 126"):
        W.check_stride(stride, 128)


def test_each_token_is_decided_where_it_sits_furthest_from_a_cut_edge():
    size, tokens = 10, 30
    starts = W.window_starts(tokens, size, 5)  # [0, 5, 10, 15, 20]
    chosen = W.deciding_window(tokens, starts, [s + size for s in starts])
    for p, w in enumerate(chosen):
        s = starts[w]
        assert s <= p < s + size

        def margin(start, p=p):
            left = p - start if start > 0 else 99
            right = start + size - 1 - p if start + size < tokens else 99
            return min(left, right)

        best = max(margin(s2) for s2 in starts if s2 <= p < s2 + size)
        assert margin(s) == best
    # The text's own start and end are no cut: the first and last tokens stay with the first and last windows.
    assert chosen[0] == 0 and chosen[-1] == len(starts) - 1
    # In the middle, with half-window strides, a token is at least a quarter window from a cut.
    assert all(min(p - starts[w], starts[w] + size - 1 - p) >= 2 for p, w in enumerate(chosen) if 5 <= p < 25)


def _position_free_logits(ids: np.ndarray, classes: int = 4) -> np.ndarray:
    """A 'model' whose logits depend on the token alone: merging windows must give back the whole text's."""
    rng = np.random.default_rng(0)
    table = rng.normal(size=(10_000, classes)).astype(np.float32)
    return table[ids]


@pytest.mark.parametrize(("tokens", "stride"), [(1, 63), (126, 63), (127, 63), (400, 63), (400, 1), (400, 126)])
def test_merged_logits_are_each_tokens_row_from_its_deciding_window(tokens, stride):
    size = 126
    ids = list(range(5, 5 + tokens))
    starts = W.window_starts(tokens, size, stride)
    ends = [min(s + size, tokens) for s in starts]
    rows = W.window_rows(ids, starts, ends, cls_id=1, sep_id=2)
    width = max(len(r) for r in rows)
    padded = np.array([r + [0] * (width - len(r)) for r in rows])
    merged = W.merge_window_logits(_position_free_logits(padded), starts, ends, tokens)
    assert np.array_equal(merged, _position_free_logits(np.array([1, *ids, 2])))
    # Logits that name their window: each token's row comes from its deciding window.
    tagged = np.zeros((len(starts), width, 1), np.float32) + np.arange(len(starts))[:, None, None]
    merged = W.merge_window_logits(tagged, starts, ends, tokens)
    assert merged[1:-1, 0].tolist() == W.deciding_window(tokens, starts, ends).tolist()


# ----------------------------------------------------------------------------------------------------
# Sentence windows


def _chars(text: str) -> list[tuple[int, int]]:
    """One token per character, whitespace dropped (as the CJK pre-tokenizer treats Chinese)."""
    return [(i, i + 1) for i, c in enumerate(text) if not c.isspace()]


def test_sentences_end_at_their_marks_with_the_closers_after_them_and_at_line_breaks():
    text = "他说：“好。”然后走了！第二句；\n第三句?末尾"
    spans = _chars(text)
    starts = W.sentence_starts(text, spans)
    firsts = [text[spans[i][0]] for i in starts]
    assert firsts == ["他", "然", "第", "第", "末"]
    # a comma, a colon or an opening quote ends nothing
    assert W.sentence_starts("甲，乙：“丙", _chars("甲，乙：“丙")) == [0]
    # a line break ends a sentence that has no mark
    assert W.sentence_starts("标题\n正文", _chars("标题\n正文")) == [0, 2]


def test_finding_sentences_is_linear_in_a_hostile_text():
    # a run of closers after a mark, and one with none: each character is read once, not looked back over
    for text in ("。" + "”" * 100_000 + "他", "”" * 100_000):
        assert W.sentence_starts(text, _chars(text)) == ([0, 100_001] if text[0] == "。" else [0])
    assert W.sentence_starts("", []) == [0]


def test_whole_sentences_are_packed_and_only_an_over_long_one_overlaps():
    # sentences of 3, 4, 2, 12 and 1 tokens; windows of 8 real tokens, stride 4
    starts, ends = W.sentence_windows(22, [0, 3, 7, 9, 21], 8, 4)
    assert list(zip(starts, ends)) == [(0, 7), (7, 9), (9, 17), (13, 21), (21, 22)]
    # every window holds whole sentences, or lies inside the one sentence longer than a window
    # a text that fits is one window; an empty text one empty window
    assert W.sentence_windows(5, [0, 2], 8, 4) == ([0], [5])
    assert W.sentence_windows(0, [0], 8, 4) == ([0], [0])
    with pytest.raises(ErnieDeployError):
        W.sentence_windows(10, [0], 8, 0)


@pytest.mark.parametrize("size", [3, 8, 30, 126])
def test_sentence_windows_merge_back_to_the_whole_text_for_any_size(size):
    rng = np.random.default_rng(size)
    text = "".join(rng.choice(list("甲乙丙丁。！？；\n”")) for _ in range(400))
    spans = _chars(text)
    tokens = len(spans)
    starts, ends = W.text_windows(list(range(tokens)), spans, size, max(1, size // 2), text)
    assert starts[0] == 0 and ends[-1] == tokens and all(e - s <= size for s, e in zip(starts, ends))
    assert all(b > a for a, b in zip(starts, starts[1:])) and all(b > a for a, b in zip(ends, ends[1:]))
    assert all(nxt <= end for end, nxt in zip(ends, starts[1:]))  # nothing is skipped
    sentence_first = set(W.sentence_starts(text, spans))
    for s, e in zip(starts, ends):  # a window starts a sentence unless it lies inside one longer than a window
        inside_long = any(a < s and b >= e and b - a > size for a, b in _sentences(sentence_first, tokens))
        assert s in sentence_first or inside_long
    ids = list(range(5, 5 + tokens))
    rows = W.window_rows(ids, starts, ends, cls_id=1, sep_id=2)
    width = max(len(r) for r in rows)
    padded = np.array([r + [0] * (width - len(r)) for r in rows])
    merged = W.merge_window_logits(_position_free_logits(padded), starts, ends, tokens)
    assert np.array_equal(merged, _position_free_logits(np.array([1, *ids, 2])))


def _sentences(firsts: set[int], tokens: int) -> list[tuple[int, int]]:
    bounds = [*sorted(firsts), tokens]
    return list(zip(bounds, bounds[1:]))


def test_sentence_windows_cost_about_one_reading_of_the_text():
    # 60 sentences of 20-40 tokens in windows of 126: each token once, plus [CLS] and [SEP] per window
    rng = np.random.default_rng(1)
    lengths = rng.integers(20, 41, size=60)
    firsts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).tolist()
    tokens = int(lengths.sum())
    starts, ends = W.sentence_windows(tokens, firsts, 126, 63)
    through = sum(e - s + 2 for s, e in zip(starts, ends))
    assert through / (tokens + 2) < 1.1
    slid = W.window_starts(tokens, 126, 63)
    assert len(slid) * 128 / (tokens + 2) > 1.9  # the sliding windows of half a window read each token twice


# ----------------------------------------------------------------------------------------------------
# Encoding with the serving tokenizer (tiny vocabulary: CJK characters, a-z, 0-9 and their ## pieces)


@pytest.fixture(scope="module")
def tokenizer(tiny_token_pipeline):
    return build_tokenizer(tiny_token_pipeline.static.vocab_file)


TEXTS = ["国足公布世预赛名单", "新闻 abc 财经 iphone15 " * 30, "中国" * 63, "中国" * 63 + "美", "股" * 400]


def test_the_head_cut_of_the_whole_encoding_is_the_truncating_tokenizer(tokenizer):
    # The Rust tokenizer's own truncation, which the head cut replaces: the same tokens, offsets and flags.
    tokenizer.enable_truncation(128)
    want = tokenizer.encode_batch(TEXTS)
    got = encoding.encode_batch(tokenizer, TEXTS, 128)  # turns the truncation off again
    assert tokenizer.truncation is None
    for b, e in enumerate(want):
        n = int(got.lengths[b])
        assert got.input_ids[b, :n].tolist() == e.ids and got.offsets[b, :n].tolist() == [list(o) for o in e.offsets]
        assert got.token_type_ids[b, :n].tolist() == e.type_ids and bool(got.truncated[b]) == bool(e.overflowing)
    assert got.truncated.tolist() == [False, True, False, True, True]


def test_windows_are_slices_of_the_whole_sequence_with_exact_offsets(tokenizer):
    whole = encoding.encode_whole(tokenizer, TEXTS)
    win = encoding.encode_windows(tokenizer, TEXTS, 128, 63)
    counts = (win.window_starts >= 0).sum(axis=1).tolist()
    assert counts[0] == 1 and counts[2] == 1 and counts[3] == 2  # 126 tokens fit; 127 take two windows
    cls, sep = tokenizer.token_to_id(CLS), tokenizer.token_to_id(SEP)
    for b, (ids, offsets) in enumerate(whole):
        assert win.text_lengths[b] == len(ids) + 2
        assert win.text_offsets[b, 1 : len(ids) + 1].tolist() == [list(o) for o in offsets]
        for w, start in enumerate(win.window_starts[b][: counts[b]]):
            part = ids[start : start + 126]
            assert win.window_ids[b, w, : len(part) + 2].tolist() == [cls, *part, sep]
    # Latin words become word pieces ("abc" -> a ##b ##c); their offsets still point at the original characters.
    text = TEXTS[1]
    pieces = [text[s:e] for s, e in whole[1][1]]
    assert pieces[2:5] == ["a", "b", "c"] and "".join(pieces[:9]) == "新闻abc财经ip"


def test_entity_offsets_from_windows_are_exact_in_the_original_text(tokenizer):
    from ernie_deploy.serving.entities import constrained_label_ids, decode_entities

    text = "abc 新闻 " * 60 + "iphone15 中国美元"  # ~500 tokens, word pieces throughout, an entity at the end
    win = encoding.encode_windows(tokenizer, [text], 128, 63)
    whole = encoding.encode_whole(tokenizer, [text])[0]
    # Logits that tag every piece of "iphone15" as one ORG, and "中国" as LOC, from whichever window decides them.
    spans = whole[1]
    want = {
        "ORG": (text.index("iphone15"), text.index("iphone15") + 8),
        "LOC": (text.index("中国"), text.index("中国") + 2),
    }
    labels = MSRA_LABELS
    logits = np.zeros((*win.window_ids.shape, len(labels)), np.float32)
    for w, start in enumerate(win.window_starts[0]):
        for k in range(int(min(126, len(spans) - start))):
            s, _ = spans[start + k]
            tag = "O"
            for kind, (a, b) in want.items():
                if a <= s < b:
                    tag = ("B-" if s == a else "I-") + kind
            logits[0, w, k + 1, labels.index(tag)] = 5.0
    merged = W.merge_windows(logits, win.window_starts, win.window_ends, win.text_lengths)
    ids = constrained_label_ids(merged, win.text_lengths, labels)
    entities = decode_entities(text, ids[0], win.text_offsets[0], int(win.text_lengths[0]), labels)
    assert [(e["type"], e["start"], e["end"], e["text"]) for e in entities] == [
        ("ORG", *want["ORG"], "iphone15"),
        ("LOC", *want["LOC"], "中国"),
    ]


@pytest.mark.parametrize("head", [0, 31, 126])
def test_head_tail_ids_are_paddlenlps_ids_of_the_kept_tokens(tiny_token_pipeline, tokenizer, head):
    from paddlenlp.transformers import ErnieTokenizer

    paddle = ErnieTokenizer(str(tiny_token_pipeline.static.vocab_file))
    got = encoding.encode_batch(tokenizer, TEXTS, 128, head_tokens=head)
    for b, text in enumerate(TEXTS):
        ids = paddle(text, truncation=False)["input_ids"][1:-1]
        kept = ids if len(ids) <= 126 else ids[:head] + ids[len(ids) - (126 - head) :]
        n = int(got.lengths[b])
        assert got.input_ids[b, :n].tolist() == [paddle.cls_token_id, *kept, paddle.sep_token_id]
        assert bool(got.truncated[b]) == (len(ids) > 126)


# ----------------------------------------------------------------------------------------------------
# Build options


def long_text_mode(model, options: BuildOptions) -> str:
    """How `model` reads a long text, as its record resolves with `options` (repository.resolve)."""
    return resolve_options(model, replace(options, runtime="python")).long_text


def test_long_text_defaults_per_kind_and_refusals(tiny_pipeline):
    assert long_text_mode(TOKEN, BuildOptions()) == "window"
    assert long_text_mode(SEQ, BuildOptions()) == "head"
    assert long_text_mode(SEQ, BuildOptions(long_text="head_tail")) == "head_tail"
    assert long_text_mode(TOKEN, BuildOptions(long_text="head")) == "head"
    with pytest.raises(ErnieDeployError, match="window does not fit sequence model") as err:
        long_text_mode(SEQ, BuildOptions(long_text="window"))
    assert "--long-text auto or head or head_tail" in err.value.fix
    with pytest.raises(ErnieDeployError, match="head_tail does not fit token model"):
        long_text_mode(TOKEN, BuildOptions(long_text="head_tail"))
    with pytest.raises(ErnieDeployError, match="--window-stride from 1 to 126"):
        long_text_mode(TOKEN, BuildOptions(window_stride=127))
    with pytest.raises(ErnieDeployError, match="--head-tokens 127 does not fit"):
        long_text_mode(SEQ, BuildOptions(long_text="head_tail", head_tokens=127))
    for size in (2, 129):
        with pytest.raises(ErnieDeployError, match=f"--window-size {size} does not fit") as err:
            long_text_mode(TOKEN, BuildOptions(window_size=size))
        assert "from 3 to 128" in err.value.fix
    with pytest.raises(ErnieDeployError, match="--window-stride from 1 to 30"):
        long_text_mode(TOKEN, BuildOptions(window_size=32, window_stride=31))
    assert long_text_mode(TOKEN, BuildOptions(window_size=32, window_stride=30)) == "window"
    for options, problem in [
        ({"window_stride": 0}, "never reach"),
        ({"long_text": "head", "window_stride": 32}, "has none"),
        ({"long_text": "head", "window_size": 32}, "--window-size sets"),
        ({"head_tokens": 10}, "--head-tokens sets"),
        ({"long_text": "tail"}, "unknown --long-text"),
        ({"long_text": "head", "window_cut": "sliding"}, "--window-cut sets"),
        ({"window_cut": "paragraphs"}, "unknown --window-cut 'paragraphs'"),
    ]:
        with pytest.raises(ErnieDeployError, match=problem):  # refused as the options are made
            BuildOptions(**options)
    # The refusal comes before any file is written, from the CLI too.
    from ernie_deploy.cli import main

    assert main(["build", "--long-text", "window", "--window-stride", "0", "--repository", "/nonexistent"]) == 2


def _artifacts(pipeline):
    return artifacts(pipeline)


def _tokenizers(entries, options):
    return tokenizer_steps(entries, {e.name: e.served(options) for e in entries})


def test_tokenizers_of_different_cuts_do_not_share_but_the_defaults_do(tiny_pipeline, tiny_token_pipeline):
    entries = [_artifacts(tiny_pipeline), _artifacts(tiny_token_pipeline)]
    default = _tokenizers(entries, BuildOptions(runtime="python", layout="ensemble"))
    assert default[SEQ.name].fingerprint == default[TOKEN.name].fingerprint  # head and window share
    fingerprints = {
        _tokenizers([entries[1]], options)[TOKEN.name].fingerprint
        for options in (
            BuildOptions(runtime="python", layout="ensemble"),
            BuildOptions(runtime="python", layout="ensemble", window_stride=32),
            BuildOptions(runtime="python", layout="ensemble", window_size=32),
            BuildOptions(runtime="python", layout="ensemble", window_cut="sliding"),
            BuildOptions(runtime="python", layout="ensemble", long_text="head"),
        )
    }
    fingerprints |= {
        _tokenizers([entries[0]], BuildOptions(runtime="python", layout="ensemble", long_text="head_tail"))[
            SEQ.name
        ].fingerprint
    }
    # head and window read different outputs of one tokenizer config; window size, stride, cut and head_tail change it.
    assert len(fingerprints) == 5


def test_a_classifier_shares_the_tokenizer_of_a_model_reading_windows_of_any_size(tiny_pipeline, tiny_token_pipeline):
    """The window settings change nothing a classifier reads: it joins the NER model's tokenizer, in one build or
    added later, and only the model reading windows writes the tokenizer's config."""
    from dataclasses import replace

    classifier, ner = _artifacts(tiny_pipeline), _artifacts(tiny_token_pipeline)
    per_model = {
        SEQ.name: classifier.served(BuildOptions(runtime="python", layout="ensemble")),
        TOKEN.name: ner.served(BuildOptions(runtime="python", layout="ensemble", window_size=8)),
    }
    steps = tokenizer_steps([classifier, ner], per_model)
    assert steps[SEQ.name].name == steps[TOKEN.name].name
    assert steps[TOKEN.name].owner and not steps[SEQ.name].owner
    # Two models reading windows of different sizes do not share.
    other = replace(ner, model=replace(ner.model, name="ner_wide"))
    steps = tokenizer_steps(
        [ner, other],
        {
            TOKEN.name: ner.served(BuildOptions(runtime="python", layout="ensemble", window_size=8)),
            "ner_wide": other.served(BuildOptions(runtime="python", layout="ensemble")),
        },
    )
    assert steps[TOKEN.name].name != steps["ner_wide"].name


# ----------------------------------------------------------------------------------------------------
# The windowed steps, both runtimes, and the offline reference


def _steps(repo, runtime="python"):
    from ernie_deploy.serving.steps import STEPS

    def load(name, key):
        from google.protobuf.json_format import MessageToDict

        config = MessageToDict(parse((repo / name / "config.pbtxt").read_text()), preserving_proto_field_name=True)
        return STEPS[key](config, repo / name / "1")

    return load


def test_windowed_ensemble_steps_answer_as_the_offline_reference(tiny_token_pipeline, tmp_path):
    from ernie_deploy.evaluate.offline import onnx_predictions
    from ernie_deploy.repository.served import served_model
    from ernie_deploy.serving.entities import entities_from_json

    p = tiny_token_pipeline
    repo = tmp_path / "models"
    build([_artifacts(p)], repo, BuildOptions(runtime="python", layout="ensemble"))
    ensemble = parse((repo / TOKEN.name / "config.pbtxt").read_text())
    maps = {s.model_name: (dict(s.input_map), dict(s.output_map)) for s in ensemble.ensemble_scheduling.step}
    assert maps[TOKEN.model_step][0] == {n: n for n in WINDOW_INPUTS}
    assert "truncated" in maps[TOKEN.postprocess_step][1] and "truncated" not in maps["ernie_tokenizer"][1]
    load = _steps(repo)
    tok, model = load("ernie_tokenizer", "tokenizer"), load(TOKEN.model_step, "onnx")
    post = load(TOKEN.postprocess_step, "token_cls_postprocess")
    requests = [TEXTS[:2], TEXTS[2:], ["国足" * 300]]
    wanted = {"window_ids", "window_type_ids", "window_starts", "window_ends", "text_offsets", "text_lengths"}
    tokens = tok.run_requests([{"text": np.array(r, dtype=object).reshape(-1, 1)} for r in requests], wanted)
    logits = model.run_requests([{n: t[n] for n in WINDOW_INPUTS} for t in tokens])
    # Merged across requests of different window counts and widths, each request's logits are its own run's.
    for t, out in zip(tokens, logits):
        alone = model({n: t[n] for n in WINDOW_INPUTS})["logits"]
        assert out["logits"].shape == (*t["window_ids"].shape, len(MSRA_LABELS))
        np.testing.assert_allclose(out["logits"], alone, atol=1e-5)
    answers = post.run_requests(
        [
            {**t, "logits": out["logits"], "text": np.array(r, dtype=object).reshape(-1, 1)}
            for t, out, r in zip(tokens, logits, requests)
        ]
    )
    texts = [t for r in requests for t in r]
    served = [entities_from_json(e) for a in answers for e in a["entities"][:, 0]]
    assert not any(a["truncated"].any() for a in answers)
    assert served == onnx_predictions(served_model(repo, TOKEN.name), p.onnx, p.static.vocab_file, texts)
    # A request's broken window tensors fail alone.
    good = {**tokens[0], "logits": logits[0]["logits"], "text": np.array(requests[0], dtype=object).reshape(-1, 1)}
    bad = {**good, "window_starts": good["window_starts"][:, ::-1].copy()}
    result = post.run_requests([bad, good])
    assert isinstance(result[0], BadRequest) and "window_starts" in str(result[0])
    assert not isinstance(result[1], Exception)


def test_a_postprocess_sent_no_window_ends_refuses_by_name(tiny_token_pipeline, tmp_path):
    """The windows' ends are part of what the tokenizer sends a windowed postprocess: a request without them is
    refused by name (no ends are guessed), and the request beside it in the batch is answered."""
    repo = tmp_path / "models"
    build([_artifacts(tiny_token_pipeline)], repo, BuildOptions(runtime="python", layout="ensemble"))
    load = _steps(repo)
    tok, model = load("ernie_tokenizer", "tokenizer"), load(TOKEN.model_step, "onnx")
    post = load(TOKEN.postprocess_step, "token_cls_postprocess")
    texts = np.array([TEXTS[1], TEXTS[4], "国足"], dtype=object).reshape(-1, 1)
    wanted = {"window_ids", "window_type_ids", "window_starts", "window_ends", "text_offsets", "text_lengths"}
    tokens = tok.run_requests([{"text": texts}], wanted)[0]
    logits = model.run_requests([{n: tokens[n] for n in WINDOW_INPUTS}])[0]["logits"]
    request = {**tokens, "logits": logits, "text": texts}
    without = {k: v for k, v in request.items() if k != "window_ends"}
    answered, refused = post.run_requests([request, without])
    assert not isinstance(answered, Exception), answered
    assert isinstance(refused, BadRequest) and "window_ends None" in refused.problem


def test_wrapped_model_for_the_ort_backend_gives_the_python_steps_logits(tiny_token_pipeline, tmp_path):
    import onnxruntime as ort

    from ernie_deploy.repository.signature import onnx_signature
    from ernie_deploy.serving.model_steps import OnnxStep

    p = tiny_token_pipeline
    repo = tmp_path / "models"
    build([_artifacts(p)], repo, BuildOptions(runtime="onnxruntime", layout="ensemble"))
    model_dir = repo / TOKEN.model_step
    config = parse((model_dir / "config.pbtxt").read_text())
    assert config.platform == "onnxruntime_onnx"
    inputs, outputs = onnx_signature(model_dir / "1" / "model.onnx")
    assert [(i.name, i.dims) for i in inputs] == [(n, (-1, -1)) for n in WINDOW_INPUTS]
    assert [(i.name, tuple(i.dims)) for i in config.input] == [(n, (-1, -1)) for n in WINDOW_INPUTS]
    assert outputs[0].dims == (-1, -1, len(MSRA_LABELS)) == tuple(config.output[0].dims)
    tokenizer = build_tokenizer(p.static.vocab_file)
    win = encoding.encode_windows(tokenizer, TEXTS, 128, 63)
    session = ort.InferenceSession(str(model_dir / "1" / "model.onnx"), providers=["CPUExecutionProvider"])
    wrapped = session.run(["logits"], {"window_ids": win.window_ids, "window_type_ids": win.window_type_ids})[0]
    step = OnnxStep({"input": [{"name": n} for n in WINDOW_INPUTS]}, p.onnx.parent)
    python = step({"window_ids": win.window_ids, "window_type_ids": win.window_type_ids})["logits"]
    real = win.window_starts >= 0
    np.testing.assert_allclose(wrapped[real], python[real], atol=1e-5)


def test_fused_windowed_model_answers_as_the_ensemble(tiny_token_pipeline, tmp_path):
    from ernie_deploy.evaluate.offline import onnx_predictions
    from ernie_deploy.repository.served import served_model
    from ernie_deploy.serving.entities import entities_from_json

    p = tiny_token_pipeline
    repo = tmp_path / "models"
    build([_artifacts(p)], repo, BuildOptions(runtime="python", layout="fused"))
    fused = _steps(repo)(TOKEN.name, "pipeline")
    out = fused({"text": np.array(TEXTS, dtype=object).reshape(-1, 1)})
    got = [entities_from_json(e) for e in out["entities"][:, 0]]
    assert got == onnx_predictions(served_model(repo, TOKEN.name), p.onnx, p.static.vocab_file, TEXTS)
    assert out["truncated"][:, 0].tolist() == [False] * len(TEXTS)


def test_head_tail_classifier_says_when_a_text_was_cut(tiny_pipeline, tmp_path):
    repo = tmp_path / "models"
    build([_artifacts(tiny_pipeline)], repo, BuildOptions(runtime="python", layout="ensemble", long_text="head_tail"))
    tokenizer = parse((repo / "ernie_tokenizer" / "config.pbtxt").read_text())
    assert tokenizer.parameters["head_tokens"].string_value == "31"
    ensemble = parse((repo / SEQ.name / "config.pbtxt").read_text())
    assert "truncated" in {o.name for o in ensemble.output}
    tok = _steps(repo)("ernie_tokenizer", "tokenizer")
    out = tok({"text": np.array(TEXTS, dtype=object).reshape(-1, 1)}, {"input_ids", "truncated"})
    assert out["truncated"][:, 0].tolist() == [False, True, False, True, True]
    configs = task_configs(
        resolve_options(
            tiny_pipeline.static.spec, BuildOptions(runtime="python", layout="ensemble", long_text="head_tail")
        ),
        tiny_pipeline.onnx,
    )
    assert [c.name for c in configs] == [
        "ernie_tokenizer",
        SEQ.model_step,
        SEQ.postprocess_step,
        SEQ.name,
    ]


# ----------------------------------------------------------------------------------------------------
# msra_docs


def test_documents_join_consecutive_sentences_with_their_tags():
    from ernie_deploy.fetch.datasets import join_sentences

    rng = np.random.default_rng(1)
    rows = []
    for i in range(3000):
        n = int(rng.integers(5, 120))
        text = "".join(chr(0x4E00 + int(c)) for c in rng.integers(0, 500, n))
        rows.append((text, [f"B-T{i}"] + ["O"] * (n - 1)))
    rows.insert(100, ("长" * 3001, ["O"] * 3001))  # longer than any document: left out
    docs = join_sentences(rows, seed=42)
    assert docs and all(300 <= len(text) <= 3000 and len(tags) == len(text) for text, tags in docs)
    assert len({len(text) for text, _ in docs}) > len(docs) // 2  # seeded target lengths, not one size
    # In order, and each document's tags are its sentences' tags: the B- tags name the sentences it joined.
    joined = [int(tag[3:]) for _, tags in docs for tag in tags if tag.startswith("B-")]
    assert joined == sorted(joined) and len(set(joined)) == len(joined)
    by_index = {i: text for i, (text, _) in enumerate(r for r in rows if len(r[0]) <= 3000)}
    first_doc = docs[0]
    starts = [k for k, tag in enumerate(first_doc[1]) if tag.startswith("B-")]
    for k, start in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(first_doc[0])
        assert first_doc[0][start:end] == by_index[int(first_doc[1][start][3:])]
    assert join_sentences(rows, seed=42) == docs


def test_smaller_windows_than_max_seq_len(tiny_token_pipeline, tmp_path):
    from ernie_deploy.evaluate.offline import onnx_predictions, paddle_predictions, window_of
    from ernie_deploy.repository.served import served_model
    from ernie_deploy.serving.entities import entities_from_json
    from ernie_deploy.serving.entity_scores import same_entities

    p = tiny_token_pipeline
    repo = tmp_path / "models"
    build([_artifacts(p)], repo, BuildOptions(runtime="python", layout="ensemble", window_size=32))
    config = parse((repo / "ernie_tokenizer" / "config.pbtxt").read_text())
    assert (config.parameters["window_size"].string_value, config.parameters["window_stride"].string_value) == (
        "32",
        "15",
    )
    load = _steps(repo)
    tok, model = load("ernie_tokenizer", "tokenizer"), load(TOKEN.model_step, "onnx")
    post = load(TOKEN.postprocess_step, "token_cls_postprocess")
    text = np.array(TEXTS, dtype=object).reshape(-1, 1)
    tokens = tok(
        {"text": text},
        {"window_ids", "window_type_ids", "window_starts", "window_ends", "text_offsets", "text_lengths"},
    )
    assert tokens["window_ids"].shape[2] == 32 and tokens["window_starts"][4, :3].tolist() == [0, 15, 30]
    answer = post({**tokens, **model({n: tokens[n] for n in WINDOW_INPUTS}), "text": text})
    served = [entities_from_json(e) for e in answer["entities"][:, 0]]
    record = served_model(repo, TOKEN.name)  # the offline references read the windows the served record names
    assert window_of(record) == (32, 15, "sentences")
    want = onnx_predictions(record, p.onnx, p.static.vocab_file, TEXTS)
    assert served == want
    # The same spans; scores within entity_scores.SCORE_TOLERANCE (Paddle's FP32 logits are not onnxruntime's bits)
    assert same_entities(paddle_predictions(record, p.static, TEXTS), want)


def test_windows_go_to_length_buckets_like_input_ids(tiny_token_pipeline, tmp_path):
    repo = tmp_path / "models"
    build(
        [_artifacts(tiny_token_pipeline)],
        repo,
        BuildOptions(runtime="python", layout="ensemble", pad_to_multiple_of=16),
    )
    tok = _steps(repo)("ernie_tokenizer", "tokenizer")
    out = tok({"text": np.array(["国足公布世预赛名单"], dtype=object).reshape(-1, 1)}, {"window_ids", "window_starts"})
    assert out["window_ids"].shape == (1, 1, 16)
    assert out["window_ids"][0, 0, 11:].tolist() == [tok.tokenizer.token_to_id("[PAD]")] * 5
