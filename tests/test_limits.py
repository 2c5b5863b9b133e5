"""Bounded cost per request: the limits on one text and on one request, where they are set, recorded, enforced and
shown, and the NER path's cost staying linear in a text's length (no step that grows with its square)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from ernie_deploy.core.errors import BadRepositoryError, BadRequest, ErnieDeployError
from ernie_deploy.serving.limits import CUT, WINDOWS, ReadingLimits, TextLimits
from ernie_deploy.serving.pipeline import PipelineStep
from ernie_deploy.serving.tokenizer_steps import TokenizerStep
from tests.conftest import artifacts
from tests.test_steps import _step_files, _texts

READ_CUT = {"input_ids", "token_type_ids"}  # what a classifier's ensemble asks its tokenizer for
READ_WINDOWS = {"window_ids", "window_type_ids", "window_starts", "window_ends", "text_offsets", "text_lengths"}


def _tokenizer(folder, **parameters) -> TokenizerStep:
    """A tokenizer step with the limits `build` writes by default, but those in `parameters`."""
    parameters = {"max_seq_len": 16, **ReadingLimits().parameters(), **parameters}
    return TokenizerStep({"parameters": {k: {"string_value": str(v)} for k, v in parameters.items()}}, folder)


@pytest.fixture
def step_dirs(tiny_pipeline, tmp_path):
    return _step_files(tiny_pipeline, tmp_path)


def test_a_text_past_the_limit_is_refused_by_name_with_its_size_and_the_option(step_dirs):
    step = _tokenizer(step_dirs, cut_max_text_chars=10, cut_max_request_chars=100)
    assert step({"text": _texts("国" * 10)}, READ_CUT)["input_ids"].shape[0] == 1  # at the limit: answered
    with pytest.raises(BadRequest) as refused:
        step({"text": _texts("国足", "国" * 11, "股市")}, READ_CUT)
    assert "text 1 has 11 characters, over this model's limit of 10 (max_text_chars)" in refused.value.problem
    assert "--max-text-chars" in refused.value.fix and "text 0" not in refused.value.problem


def test_bytes_that_cannot_be_within_the_limit_are_refused_before_decoding(step_dirs):
    step = _tokenizer(step_dirs, cut_max_text_chars=10, cut_max_request_chars=100)
    # 41 bytes of invalid UTF-8: too long for 10 characters whatever they are, so named for its size, not its bytes
    with pytest.raises(BadRequest) as refused:
        step({"text": _texts(b"\xff" * 41)}, READ_CUT)
    assert "is 41 bytes" in refused.value.problem and "max_text_chars" in refused.value.problem
    # 40 bytes may be 10 characters: decoded, and refused for what they are
    with pytest.raises(BadRequest, match="not valid UTF-8"):
        step({"text": _texts(b"\xff" * 40)}, READ_CUT)


def test_a_request_past_its_total_is_refused_and_the_others_in_the_merged_batch_are_answered(step_dirs):
    step = _tokenizer(step_dirs, cut_max_text_chars=10, cut_max_request_chars=25)
    good = {"text": _texts("国足公布世预赛名单")}
    heavy = {"text": _texts(*["股市大涨" * 2] * 4)}  # 4 texts of 8: each within, 32 in all
    full = {"text": _texts("国" * 10, "国" * 10, "国" * 5)}  # exactly 25
    results = step.run_requests([good, heavy, full, good], READ_CUT)
    assert isinstance(results[1], BadRequest)
    assert "the request carries 32 characters in 4 texts, over this model's limit of 25 per request" in str(results[1])
    assert "--max-request-chars" in results[1].fix
    assert not any(isinstance(r, ErnieDeployError) for r in (results[0], results[2], results[3]))
    assert results[0]["input_ids"].tolist() == step(good, READ_CUT)["input_ids"].tolist()


def test_a_shared_tokenizer_holds_each_request_to_the_limits_of_what_it_reads(step_dirs):
    """One tokenizer serves a classifier (the cut text) and an NER model (windows over all of it); a character costs
    the windowed model ~50x more, so a request for windows meets the windows' limit, in the same merged batch."""
    step = _tokenizer(step_dirs)  # the defaults, as `build` writes them for both
    assert step.limits == ReadingLimits(CUT, WINDOWS) and WINDOWS.max_text_chars < CUT.max_text_chars
    text = {"text": _texts("国" * (WINDOWS.max_text_chars + 1))}
    cut, windows = step.run_requests([text, text], READ_CUT | READ_WINDOWS, wanted=[READ_CUT, READ_WINDOWS])
    assert cut["input_ids"].shape == (1, 16)
    assert isinstance(windows, BadRequest)
    assert f"over this model's limit of {WINDOWS.max_text_chars:,} (max_text_chars)" in windows.problem


def test_a_fused_model_enforces_the_limits_of_its_reading(step_dirs):
    params = {"max_seq_len": "16", **ReadingLimits.given(5, 5).parameters()}
    params["postprocess"] = "seq_cls_postprocess"
    fused = PipelineStep(
        {"parameters": {k: {"string_value": v} for k, v in params.items()}, "output": [{"name": "label"}]},
        step_dirs,
    )
    with pytest.raises(BadRequest, match="max_text_chars"):
        fused({"text": _texts("国" * 6)})
    assert fused({"text": _texts("国" * 5)})["label"].shape == (1, 1)


def test_a_tokenizer_built_before_limits_existed_is_refused_with_the_rebuild_command(step_dirs):
    """A tokenizer config without the limits (as `build` wrote it before they existed) does not load: a model never
    runs unbounded, nor with limits guessed for it."""
    with pytest.raises(BadRepositoryError, match="no cut_max_text_chars, .*window_max_request_chars") as refused:
        TokenizerStep({"parameters": {"max_seq_len": {"string_value": "16"}}}, step_dirs)
    assert "older ernie-deploy" in refused.value.problem and "ernie-deploy build" in refused.value.fix


def test_build_records_the_limits_and_check_shows_each_models_own(tiny_pipeline, tiny_token_pipeline, tmp_path, capsys):
    from ernie_deploy.cli import main
    from ernie_deploy.repository.build import BuildOptions, build
    from ernie_deploy.repository.configs import parse
    from ernie_deploy.repository.served import served_limits

    repo = tmp_path / "models"
    entries = [artifacts(p) for p in (tiny_pipeline, tiny_token_pipeline)]
    build(entries, repo, BuildOptions(runtime="python", layout="ensemble"))
    config = parse((repo / "ernie_tokenizer" / "config.pbtxt").read_text())  # one tokenizer still serves both
    assert {k: int(config.parameters[k].string_value) for k in ReadingLimits.PARAMETERS} == ReadingLimits().parameters()
    assert served_limits(repo) == {
        "ernie_seqcls": ("ernie_tokenizer", CUT),
        "ernie_tokencls": ("ernie_tokenizer", WINDOWS),
    }
    assert main(["check", "-r", str(repo)]) == 0
    out = capsys.readouterr().out
    assert f"ernie_tokencls: texts of at most {WINDOWS.max_text_chars:,} characters, " in out

    build(
        entries[:1],
        repo,
        BuildOptions(runtime="python", layout="ensemble", max_text_chars=3000, max_request_chars=9000),
    )
    # the classifier's new limits: a tokenizer of its own; the NER model keeps its tokenizer and its limits
    limits = served_limits(repo)
    assert limits["ernie_seqcls"][1] == TextLimits(3000, 9000) and limits["ernie_seqcls"][0] != "ernie_tokenizer"
    assert limits["ernie_tokencls"] == ("ernie_tokenizer", WINDOWS)


@pytest.mark.parametrize(
    "text_chars, request_chars, message",
    [(0, 10, "at least one character"), (100, 99, "one text of the longest length"), (None, 0, "at least one")],
)
def test_limits_that_cannot_work_are_refused_at_build(text_chars, request_chars, message):
    from ernie_deploy.repository.options import BuildOptions, check_options

    with pytest.raises(ErnieDeployError, match=message):
        check_options(BuildOptions(max_text_chars=text_chars, max_request_chars=request_chars))


def test_one_limit_set_alone_moves_the_other_default_where_it_must():
    assert ReadingLimits.given(max_request_chars=24_000) == ReadingLimits(
        TextLimits(24_000, 24_000), TextLimits(8_000, 24_000)
    )
    assert ReadingLimits.given(max_text_chars=50_000).windows == TextLimits(50_000, 50_000)
    assert ReadingLimits.given(max_text_chars=50_000).cut == TextLimits(50_000, CUT.max_request_chars)


def test_the_build_command_takes_the_limits():
    from ernie_deploy.cli import build_parser

    args = build_parser().parse_args(["build", "--max-text-chars", "500", "--max-request-chars", "2000"])
    assert (args.max_text_chars, args.max_request_chars) == (500, 2000)


# ---------------------------------------------------------------------------------------------------
# Linear cost of the NER path (what grew with the square of a text's length before)


def _peak_mb(fn) -> float:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def test_choosing_each_tokens_window_costs_memory_linear_in_the_text():
    from ernie_deploy.serving.windows import deciding_window, window_starts

    size, stride = 126, 63
    peaks = {}
    for tokens in (20_000, 80_000):
        starts = window_starts(tokens, size, stride)
        ends = [s + size for s in starts]
        peaks[tokens] = _peak_mb(lambda: deciding_window(tokens, starts, ends))  # noqa: B023 - run at once
    # a [windows, tokens] table took 80,000 x 1,269 x 8 bytes = 812 MB per array here; a linear one takes a few MB
    assert peaks[80_000] < 60, peaks
    assert peaks[80_000] < 6 * peaks[20_000], peaks


def test_merged_windows_pick_each_tokens_deciding_window_on_a_long_text():
    """The linear choice is the same as scoring every window against every token (the definition), on a text long
    enough for both to run."""
    from ernie_deploy.serving.windows import deciding_window, window_starts

    for tokens, size, stride in ((3_000, 126, 63), (1_000, 10, 1), (500, 126, 126), (127, 126, 63)):
        starts = np.asarray(window_starts(tokens, size, stride))[:, None]
        ends = np.minimum(starts + size, tokens)
        position = np.arange(tokens)[None, :]
        big = tokens + size
        left = np.where(starts > 0, position - starts, big)
        right = np.where(ends < tokens, ends - 1 - position, big)
        inside = (position >= starts) & (position < ends)
        expected = np.where(inside, np.minimum(left, right), -1).argmax(axis=0)
        assert deciding_window(tokens, starts[:, 0].tolist(), ends[:, 0].tolist()).tolist() == expected.tolist()


def test_windows_are_padded_per_request_not_across_the_merged_batch(tiny_token_pipeline, tmp_path):
    """A long text's windows stay in its own request: a short request merged with it gets the tensors it gets alone."""
    folder = _step_files(tiny_token_pipeline, tmp_path)
    step = _tokenizer(folder, window_stride=7)
    wanted = READ_WINDOWS
    short, long = {"text": _texts("国足公布")}, {"text": _texts("国足公布世预赛名单" * 40)}
    alone = step(short, wanted)
    merged = step.run_requests([long, short], wanted)[1]
    assert {k: v.shape for k, v in merged.items()} == {k: v.shape for k, v in alone.items()}
    assert all(np.array_equal(merged[k], alone[k]) for k in wanted)
