"""repository.plan: one step decides every open fact of each model's record, every default has one home that every
reader asks, and build options are checked once, as they are made."""

from __future__ import annotations

import pytest

from ernie_deploy.core.errors import BadOptionsError
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.evaluate.windows import window_of
from ernie_deploy.repository import options as build_options
from ernie_deploy.repository.configs import tokenizer_config
from ernie_deploy.repository.options import BuildOptions, RecordOverrides
from ernie_deploy.repository.plan import ServedModel, plan, served_wire, settle, thresholds
from ernie_deploy.serving import record_defaults
from ernie_deploy.serving.windows import default_stride

NER = ("O", "B-PER", "I-PER")


def _record(task: str = "token_cls", **facts) -> ModelSpec:
    labels = NER if task == "token_cls" else ("a", "b")
    return ModelSpec.new(task, labels=labels, max_seq_len=128, trained_tokens=30, **facts)


def _planned(record: ModelSpec, **options) -> ModelSpec:
    return plan([record], BuildOptions(**{"runtime": "python", **options}))[0]


# --- a stride recorded without a size: every reader reads the same windows -------------------------------------


@pytest.mark.parametrize(("stride", "size"), [(100, 128), (10, 30), (None, 30)])
def test_a_stride_recorded_without_a_size_reads_the_same_windows_everywhere(stride, size):
    """A stride too long for windows of the trained length was chosen for windows of max_seq_len, which it keeps:
    the plan, the offline evaluation, the record's defaults and the tokenizer config all say so."""
    record = _record(long_text="window", window_stride=stride)
    planned = _planned(record)
    expected = (size, stride or default_stride(size), "sentences")
    assert (planned.window_size, planned.window_stride, planned.window_cut) == expected
    assert tuple(window_of(record)) == expected  # the record as export or convert left it
    assert tuple(window_of(planned)) == expected  # the record as served
    assert tuple(record_defaults.windows(record)) == expected
    params = {k: v.string_value for k, v in tokenizer_config("tok", planned).parameters.items()}
    assert params["window_stride"] == str(expected[1]) and params["window_cut"] == "sentences"
    assert params.get("window_size", "128") == str(size)  # windows of max_seq_len are written as no size


# --- plan decides each fact ---------------------------------------------------------------------------------------


def _fact(record: ModelSpec, options: dict, backends=None, served=None) -> tuple[ModelSpec, BuildOptions]:
    settled = settle(BuildOptions(**options), backends, served)
    return plan([record], settled)[0], settled


FACTS = [
    # (what is decided, record, options, backends, served model, field of the planned record, expected)
    ("runtime from the server", _record(), {}, {"onnxruntime"}, None, "serving.runtime", "onnxruntime"),
    ("runtime without the ORT backend", _record(), {}, set(), None, "serving.runtime", "python"),
    (
        "runtime of a python-only layout",
        _record(),
        {"layout": "tokenizer-in-model"},
        {"onnxruntime"},
        None,
        "serving.runtime",
        "python",
    ),
    ("layout of a token model", _record(), {"runtime": "python"}, None, None, "layout", "fused"),
    ("layout named", _record(), {"runtime": "python", "layout": "ensemble"}, None, None, "layout", "ensemble"),
    (
        "layout a version keeps",
        _record(),
        {"runtime": "python"},
        None,
        ServedModel("m", "ensemble", False),
        "layout",
        "ensemble",
    ),
    (
        "cache a version keeps",
        _record(),
        {"runtime": "python"},
        None,
        ServedModel("m", "ensemble", True),
        "serving.response_cache",
        True,
    ),
    ("wire", _record(), {"runtime": "python"}, None, None, "io", "ernie-deploy"),
    ("wire named", _record(), {"runtime": "python", "io": "paddlenlp"}, None, None, "io", "paddlenlp"),
    ("window size", _record(), {"runtime": "python"}, None, None, "window_size", 30),
    ("window stride", _record(), {"runtime": "python"}, None, None, "window_stride", 14),
    ("window cut", _record(), {"runtime": "python"}, None, None, "window_cut", "sentences"),
    ("classifier reading", _record("seq_cls"), {"runtime": "python"}, None, None, "long_text", "head"),
    ("classifier windows", _record("seq_cls"), {"runtime": "python"}, None, None, "window_size", None),
    (
        "head tokens",
        _record("seq_cls"),
        {"runtime": "python", "long_text": "head_tail"},
        None,
        None,
        "head_tokens",
        31,
    ),
    ("spinning", _record(), {"runtime": "python"}, None, None, "serving.ort_spinning", "off"),
    (
        "spinning named",
        _record(),
        {"runtime": "python", "ort_spinning": "run"},
        None,
        None,
        "serving.ort_spinning",
        "run",
    ),
    ("decoding", _record(), {"runtime": "python"}, None, None, "ner_decoding", "constrained"),
    ("decoding recorded", _record(ner_decoding="argmax"), {"runtime": "python"}, None, None, "ner_decoding", "argmax"),
    ("classifier decoding", _record("seq_cls"), {"runtime": "python"}, None, None, "ner_decoding", None),
    ("batch limit", _record(), {"runtime": "python", "max_batch_size": 8}, None, None, "serving.max_batch_size", 8),
    ("text limit of windows", _record(), {"runtime": "python"}, None, None, "max_text_chars", 8_000),
    ("text limit of a cut", _record("seq_cls"), {"runtime": "python"}, None, None, "max_text_chars", 100_000),
    (
        "thresholds recorded",
        _record("multi_label", thresholds={"a": 0.3, "b": 0.6}),
        {"runtime": "python"},
        None,
        None,
        "thresholds",
        {"a": 0.3, "b": 0.6},
    ),
]


@pytest.mark.parametrize(("fact", "record", "options", "backends", "served", "field", "expected"), FACTS)
def test_plan_decides_each_fact(fact, record, options, backends, served, field, expected):
    planned, settled = _fact(record, options, backends, served)
    value = planned
    for part in field.split("."):
        value = getattr(value, part)
    assert value == expected, fact
    assert plan([planned], settled) == [planned], "a planned record planned again is itself"


def test_thresholds_and_wire_have_one_home(tmp_path):
    record = _record("multi_label", thresholds={"a": 0.3, "b": 0.6})
    assert thresholds(record, None, tmp_path) == {"a": 0.3, "b": 0.6}
    (tmp_path / "t.json").write_text('{"a": 0.1, "b": 0.9}')
    assert thresholds(record, tmp_path / "t.json", tmp_path) == {"a": 0.1, "b": 0.9}
    assert thresholds(_record("seq_cls"), None, tmp_path) is None
    assert served_wire("m", "paddlenlp", None) == "paddlenlp"
    with pytest.raises(BadOptionsError, match="answers its clients in the paddlenlp wire"):
        served_wire("m", "paddlenlp", "ernie-deploy")


def test_the_runtime_must_be_settled_where_no_server_was_asked():
    with pytest.raises(BadOptionsError, match="runtime 'auto'"):
        plan([_record()], BuildOptions())


# --- options are checked once, as they are made -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"runtime": "no_such_runtime"}, "unknown runtime"),
        ({"device": "tpu"}, "unknown device"),
        ({"ort_spinning": "yes"}, "--ort-spinning"),
        ({"max_queue_size": -1}, "--max-queue-size"),
        ({"classic": True, "max_queue_size": 4}, "--classic"),
        ({"long_text": "tail"}, "--long-text"),
        ({"long_text": "head", "window_size": 32}, "--window-size"),
        ({"window_stride": 0}, "--window-stride"),
        ({"head_tokens": 10}, "--head-tokens"),
        ({"ner_decoding": "best"}, "decoding"),
        ({"max_text_chars": 0}, "--max-text-chars"),
        ({"reference_texts": "texts.txt", "monitor": False}, "--reference"),
        ({"runtime": "python", "device": "gpu"}, "--device gpu"),
        ({"runtime": "python", "ort_graph_level": "basic"}, "--ort-graph-level"),
    ],
)
def test_options_that_do_not_combine_are_refused_as_they_are_made(options, named):
    with pytest.raises(BadOptionsError) as refused:
        BuildOptions(**options)
    assert named in refused.value.problem and refused.value.fix


def test_the_overrides_alone_are_checked_as_they_are_made():
    with pytest.raises(BadOptionsError, match="--head-tokens"):
        RecordOverrides(head_tokens=10)
    # runtime "auto" is accepted until it is settled, and the settled options are checked as they are made.
    assert BuildOptions(device="gpu").runtime == "auto"
    with pytest.raises(BadOptionsError, match="--device gpu"):
        settle(BuildOptions(device="gpu"), set())


def test_a_build_checks_the_options_once(tiny_pipeline, tiny_token_pipeline, tmp_path, monkeypatch):
    """The options are checked where they are made, and a build of any number of models checks them no more: the
    plan reads them (it used to check them 2 + N times, and once more from the command line)."""
    from ernie_deploy.pipeline.build import build_models
    from ernie_deploy.repository.build import model_artifacts

    calls = []
    check = build_options.check_options
    monkeypatch.setattr(build_options, "check_options", lambda options: calls.append(options) or check(options))
    options = BuildOptions(runtime="python", reference_texts=None)
    assert len(calls) == 1
    entries = [model_artifacts(p.static, p.onnx) for p in (tiny_pipeline, tiny_token_pipeline)]
    build_models(entries, options, tmp_path / "models")
    assert len(calls) == 1
    settled = settle(BuildOptions(ner_decoding="argmax"), {"onnxruntime"})
    assert settled.runtime == "onnxruntime" and len(calls) == 3  # made, then settled: a new object, checked
