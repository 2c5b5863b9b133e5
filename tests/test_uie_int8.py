"""A UIE model in static INT8 (export.uie_int8): its calibration rows are the rows the answering step builds, its gate
compares the spans the INT8 and FP32 models extract and refuses a model that finds others, and `convert --quantize
int8` of the demo UIE keeps its spans, its FP32 signature, and answers each text as it answers it alone.

The model is the shipped demo UIE (demo/uie, 2 x 256; the conftest's uie_pipeline exports it), calibrated and gated on
64 texts (the command's defaults are 256 each) to keep the module short: about 40 s here, export included."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from ernie_deploy.core.errors import BadOptionsError, ParityError
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.export import uie_int8
from ernie_deploy.export.uie_int8 import (
    PromptCalibration,
    Reading,
    SpanDriftReport,
    check_span_drift,
    chunked,
    require_span_drift,
)
from ernie_deploy.fetch.data import read_split
from ernie_deploy.kinds.uie.evaluate import score
from ernie_deploy.pipeline.convert import convert_model
from ernie_deploy.pipeline.options import ConvertOptions
from ernie_deploy.serving.runtime import OnnxModel
from ernie_deploy.serving.spans import extract, prompt_rows
from ernie_deploy.serving.tokenizer import build_tokenizer

N = 64  # calibration and gate texts


def _vocab(folder: Path, text: str) -> Path:
    chars = sorted(set(text) - {" "})
    path = folder / "vocab.txt"
    path.write_text("\n".join(["[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]", *chars]) + "\n", encoding="utf-8")
    return path


def test_calibration_feeds_each_served_row_alone_and_unpadded(tmp_path):
    texts = ("张三在北京的百度公司担任工程师。", "李四加入阿里巴巴，总部在杭州。" * 3)
    prompts = ("人名", "机构名")
    vocab = _vocab(tmp_path, "".join(texts + prompts))
    reading = Reading(prompts, list(prompts), row_tokens=16, stride=5, position_prob=0.5, lowercase=True)
    feeds = list(PromptCalibration(texts, vocab, reading).feeds())

    served = prompt_rows(build_tokenizer(vocab, lowercase=True), list(texts), list(prompts), 16, 5)
    assert len(feeds) == len(served) > len(texts) * len(prompts)  # the long text is read in windows, as served
    cls, sep = 1, 2
    for r, feed in enumerate(feeds):
        length = int(served.lengths[r])
        assert feed["input_ids"].shape == feed["token_type_ids"].shape == (1, length)  # no padding
        np.testing.assert_array_equal(feed["input_ids"][0], served.input_ids[r, :length])
        np.testing.assert_array_equal(feed["token_type_ids"][0], served.token_type_ids[r, :length])
        ids = feed["input_ids"][0]
        assert ids[0] == cls and ids[-1] == sep and 0 not in ids  # [CLS] prompt [SEP] text [SEP]
        prompt_end = list(ids).index(sep)
        assert feed["token_type_ids"][0, : prompt_end + 1].sum() == 0 and feed["token_type_ids"][0, -1] == 1


def test_the_reading_is_the_schema_and_windows_the_model_is_served_with():
    model = ModelSpec(name="m", task="uie", labels=["人名", "地名"], max_seq_len=128, trained_tokens=33)
    reading = Reading.of(model)
    assert reading.prompts == ("人名", "地名") and (reading.row_tokens, reading.stride) == (33, 15)
    with_schema = Reading.of(replace(model, schema={"人物": ["公司"]}, window_size=64, window_stride=20))
    assert with_schema.prompts == ("人物",) and (with_schema.row_tokens, with_schema.stride) == (64, 20)


def test_a_report_below_its_gate_is_refused_by_name():
    report = SpanDriftReport(n=10, pairs=30, spans_agree=0.99, span_f1=0.95, max_abs_diff=0.3, min_span_f1=0.97)
    with pytest.raises(ParityError) as refused:
        require_span_drift(report, Path("model.onnx"))
    assert "span F1 0.9500" in refused.value.problem and "0.97 required" in refused.value.problem
    assert "--quantize" in refused.value.fix and "--calibration-data" in refused.value.fix
    require_span_drift(replace(report, span_f1=0.97), Path("model.onnx"))  # at the gate: passes


@pytest.fixture(scope="module")
def converted(uie_pipeline, tmp_path_factory) -> Path:
    """The demo UIE through `convert --quantize int8` (pipeline.convert.convert_model, as the command runs it)."""
    out = tmp_path_factory.mktemp("uie_int8") / "onnx" / "model.onnx"
    options = ConvertOptions(quantize="int8", calibration_n=N, parity_n=N)
    convert_model(uie_pipeline.static, options, out=out, log=lambda line: None)
    return out


def _test_split(uie_pipeline, n: int):
    return [part[:n] for part in read_split(uie_pipeline.data, "test", "jsonl")]


def _answers(path: Path, static, texts: list[str]) -> list[dict]:
    reading = Reading.of(static.spec)
    tokenizer = build_tokenizer(static.vocab_file, lowercase=reading.lowercase)
    model = chunked(OnnxModel(path, outputs=("start_prob", "end_prob")))
    return extract(tokenizer, texts, reading.schema, model, max_seq_len=reading.row_tokens, stride=reading.stride)


def test_int8_conversion_keeps_the_signature_and_the_spans(converted, uie_pipeline):
    import onnx

    folder = converted.parent
    assert ModelSpec.read(folder).precision == "int8-static"
    report = json.loads((folder / "parity.json").read_text())
    assert report["int8"]["ok"] and report["int8"]["span_f1"] >= 0.97 and report["int8"]["n"] == N
    assert report["int8"]["calibration"]["n"] == N and report["int8"]["calibration"]["rows"] > 3 * N
    assert report["int8"]["quantized"].get("QLinearMatMul", 0) > 0

    def signature(path):
        graph = onnx.load(str(path)).graph
        return [(v.name, v.type.tensor_type.elem_type) for v in (*graph.input, *graph.output)]

    fp32 = folder / "model.fp32.onnx"
    assert signature(converted) == signature(fp32)
    assert [name for name, _ in signature(converted)[2:]] == ["start_prob", "end_prob"]
    assert all(t == onnx.TensorProto.FLOAT for _, t in signature(converted)[2:])

    texts, gold = _test_split(uie_pipeline, 300)  # not the gate's texts alone
    labels = list(uie_pipeline.static.spec.labels)
    f1 = {
        p.name: score(texts, gold, _answers(p, uie_pipeline.static, texts), labels)["span_f1"]
        for p in (fp32, converted)
    }
    assert abs(f1[converted.name] - f1[fp32.name]) <= 0.01, f1


def test_int8_answers_a_text_alone_as_inside_a_batch(converted, uie_pipeline):
    texts, tags = _test_split(uie_pipeline, 400)
    texts = [t for t, tag in zip(texts, tags) if set(tag) != {"O"}][:40]  # sentences that hold an entity
    static = uie_pipeline.static
    together = _answers(converted, static, texts)
    backwards = _answers(converted, static, texts[::-1])[::-1]  # other companions padded to other lengths
    alone = [_answers(converted, static, [t])[0] for t in texts]
    assert sum(bool(a) for a in alone) >= 20  # spans to compare
    for one, *others in zip(alone, together, backwards):
        for other in others:
            assert one.keys() == other.keys()
            for kind in one:
                assert [(s["start"], s["end"]) for s in one[kind]] == [(s["start"], s["end"]) for s in other[kind]]
                np.testing.assert_allclose(
                    [s["probability"] for s in one[kind]], [s["probability"] for s in other[kind]], atol=1e-6
                )


def _swapped_heads(source: Path, out: Path) -> Path:
    """`source` with its outputs' names swapped: end probabilities answered as start_prob and start as end_prob."""
    import onnx

    model = onnx.load(str(source))
    a, b = (o.name for o in model.graph.output)
    rename = {a: b, b: a}
    for node in model.graph.node:
        node.output[:] = [rename.get(n, n) for n in node.output]
    onnx.save(model, str(out))
    return out


def test_the_gate_refuses_a_model_that_finds_other_spans(converted, uie_pipeline, tmp_path):
    texts, _ = _test_split(uie_pipeline, N)
    folder = converted.parent
    reading = Reading.of(uie_pipeline.static.spec)
    vocab = uie_pipeline.static.vocab_file
    same = check_span_drift(folder / "model.fp32.onnx", converted, vocab, reading, texts)
    assert same.ok and same.pairs == 3 * N
    bad = check_span_drift(
        folder / "model.fp32.onnx", _swapped_heads(converted, tmp_path / "bad.onnx"), vocab, reading, texts
    )
    assert not bad.ok and bad.span_f1 < 0.5, bad
    with pytest.raises(ParityError, match="finds other spans than FP32"):
        require_span_drift(bad, tmp_path / "bad.onnx")


def test_a_refused_int8_model_leaves_the_previous_one(converted, uie_pipeline, tmp_path, monkeypatch):
    """The whole command with a quantizer that makes a wrong model: refused, the model before it served still."""
    out = tmp_path / "onnx" / "model.onnx"
    out.parent.mkdir()
    for name in ("model.onnx", "model.json", "parity.json"):
        (out.parent / name).write_bytes((converted.parent / name).read_bytes())
    before = out.read_bytes()
    made = uie_int8.quantize_int8_static

    def wrong(fp32, target, calibration, **options):
        info = made(fp32, target, calibration, **options)
        _swapped_heads(Path(target), Path(target))
        return info

    monkeypatch.setattr(uie_int8, "quantize_int8_static", wrong)
    options = ConvertOptions(quantize="int8", calibration_n=8, parity_n=N)
    with pytest.raises(ParityError, match="finds other spans than FP32"):
        convert_model(uie_pipeline.static, options, out=out, log=lambda line: None)
    assert out.read_bytes() == before
    assert not json.loads((out.parent / "parity.rejected.json").read_text())["int8"]["ok"]


@pytest.mark.parametrize(
    ("options", "says"), [({"quantize": "int8-dynamic"}, "dynamic scales"), ({"fp16": True}, "GPU")]
)
def test_dynamic_int8_and_fp16_are_refused_by_name(uie_pipeline, tmp_path, options, says):
    with pytest.raises(BadOptionsError) as refused:
        convert_model(uie_pipeline.static, ConvertOptions(**options), out=tmp_path / "model.onnx")
    assert says in refused.value.problem and "--quantize int8" in refused.value.fix
    assert not (tmp_path / "model.onnx").exists()


@pytest.mark.integration
def test_the_int8_model_is_served_as_it_answers_in_process(converted, uie_pipeline, tmp_path):
    """`build` serves the INT8 model through the extraction step; a real server answers the test texts with the spans
    the model finds in process."""
    import tritonclient.grpc as grpcclient

    from ernie_deploy.repository.build import BuildOptions, ModelArtifacts, build
    from ernie_deploy.server.process import TritonServer

    static = uie_pipeline.static
    spec = ModelSpec.read(converted.parent)
    repo = tmp_path / "models"
    build(ModelArtifacts(spec, converted, static.vocab_file), repo, BuildOptions(runtime="python"))
    texts, _ = _test_split(uie_pipeline, 20)
    expected = _answers(converted, static, texts)
    with TritonServer(repo, http_port=0, grpc_port=0, metrics_port=0, log_file=tmp_path / "server.log") as server:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        array = np.array([t.encode("utf-8") for t in texts], dtype=np.object_).reshape(-1, 1)
        tensor = grpcclient.InferInput("text", list(array.shape), "BYTES")
        tensor.set_data_from_numpy(array)
        result = client.infer(spec.name, [tensor], outputs=[grpcclient.InferRequestedOutput("result")])
        served = [json.loads(item) for item in result.as_numpy("result").reshape(-1)]
    for theirs, ours in zip(served, expected):
        assert {k: [(s["start"], s["end"]) for s in v] for k, v in theirs.items()} == {
            k: [(s["start"], s["end"]) for s in v] for k, v in ours.items()
        }
