"""build --graph-postprocess and --tokenizer-in-model without a server: the graph surgery run by onnxruntime in
process against the python postprocess, the steps against the steps they merge, the configs and the refusals."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.core.tasks import PAIR_CLS, SEQ_CLS, TOKEN_CLS
from ernie_deploy.kinds.sequence.serving import SeqClsPostprocess
from ernie_deploy.repository.layouts import check_build_options, task_configs
from ernie_deploy.repository.options import BuildOptions
from ernie_deploy.repository.resolve import resolve_options
from ernie_deploy.serving.model_steps import OnnxStep
from ernie_deploy.serving.tokenizer_steps import TokenizerOnnxStep, TokenizerStep
from tests.conftest import tokenizer_step
from tests.test_steps import _step_files, _texts


@pytest.fixture
def graph_dir(tiny_pipeline, tmp_path):
    """A model step's version folder as `build --graph-postprocess` writes it."""
    from ernie_deploy.repository.postprocess_graph import write_with_postprocess

    folder = _step_files(tiny_pipeline, tmp_path)
    write_with_postprocess(tiny_pipeline.static.spec, tiny_pipeline.onnx, folder / "model.onnx")
    return folder


def _graph_step_config(pipeline):
    from google.protobuf.json_format import MessageToDict

    options = BuildOptions(runtime="python", layout="graph-postprocess")
    _, model, _ = task_configs(resolve_options(pipeline.static.spec, options), pipeline.onnx)
    return MessageToDict(model, preserving_proto_field_name=True)


def test_graph_answers_what_the_python_postprocess_answers(tiny_pipeline, graph_dir):
    import onnxruntime as ort

    from ernie_deploy.serving.runtime import OnnxModel

    rng = np.random.default_rng(0)
    ids = rng.integers(5, 60, size=(64, 24))
    ids[:, 0], ids[:, -1] = 1, 2
    types = np.zeros_like(ids)
    logits = OnnxModel(tiny_pipeline.onnx)(ids, types)
    # (A tiny random model puts every text in one class: test_graph_lookup_of_every_label covers each name.)
    want = SeqClsPostprocess({}, graph_dir)({"logits": logits})
    session = ort.InferenceSession(str(graph_dir / "model.onnx"), providers=["CPUExecutionProvider"])
    names = ["label_id", "label", "confidence", "probabilities", "logits"]
    assert [o.name for o in session.get_outputs()] == names
    label_id, label, confidence, probabilities, raw = session.run(None, {"input_ids": ids, "token_type_ids": types})
    # every label's probability, as the python step answers it, and the model's own logits passed through
    np.testing.assert_allclose(probabilities, want["probabilities"], atol=1e-5, rtol=0)
    np.testing.assert_allclose(raw, logits, atol=1e-5, rtol=0)
    assert label_id.dtype == np.int64 and label_id.shape == (64, 1)
    assert np.array_equal(label_id, want["label_id"])
    assert [s for s in label[:, 0]] == [b.decode() for b in want["label"][:, 0]]
    assert confidence.dtype == np.float32 and confidence.shape == (64, 1)
    np.testing.assert_allclose(confidence, want["confidence"], atol=1e-5, rtol=0)


def test_graph_lookup_of_every_label(tiny_pipeline, tmp_path):
    """Each class id maps to its own name: logits that put each class first in turn, fed to the appended graph."""
    import onnxruntime as ort

    from ernie_deploy.repository.postprocess_graph import postprocess_graph

    labels = tiny_pipeline.static.labels
    graph = postprocess_graph(tiny_pipeline.static.spec, tiny_pipeline.onnx)
    session = ort.InferenceSession(graph.SerializeToString(), providers=["CPUExecutionProvider"])
    logits = np.eye(len(labels), dtype=np.float32) * 5
    label_id, label, confidence, probabilities, raw = session.run(None, {"logits": logits})
    assert np.array_equal(raw, logits) and np.array_equal(probabilities.argmax(-1), label_id[:, 0])
    assert label_id[:, 0].tolist() == list(range(len(labels)))
    assert label[:, 0].tolist() == labels
    want = SeqClsPostprocess({}, _step_files(tiny_pipeline, tmp_path))({"logits": logits})
    np.testing.assert_allclose(confidence, want["confidence"], atol=1e-6)


def test_graph_needs_labels_that_fit_the_model(tiny_pipeline):
    from ernie_deploy.repository.postprocess_graph import postprocess_graph

    with pytest.raises(ErnieDeployError, match="10 classes but the model's labels name 3"):
        postprocess_graph(replace(tiny_pipeline.static.spec, labels=("a", "b", "c")), tiny_pipeline.onnx)


def test_graph_model_step_merges_requests_and_fails_a_bad_one_alone(tiny_pipeline, graph_dir):
    config = {"parameters": {"max_seq_len": {"string_value": "32"}}}
    tokenizer, post = tokenizer_step(config, graph_dir), SeqClsPostprocess({}, graph_dir)
    plain = OnnxStep({}, _step_files(tiny_pipeline, graph_dir.parent / "plain"))
    graph = OnnxStep(_graph_step_config(tiny_pipeline), graph_dir)
    assert graph.outputs == ("label_id", "label", "confidence", "probabilities", "logits")
    tokens = tokenizer.run_requests([{"text": _texts("国足")}, {"text": _texts("股市大涨 abc123" * 3, "中国")}])
    past_vocab = {"input_ids": np.array([[1, 10**6, 2]], np.int64), "token_type_ids": np.zeros((1, 3), np.int64)}
    got = graph.run_requests([tokens[0], past_vocab, tokens[1]])
    assert isinstance(got[1], ErnieDeployError)
    # What no request names is not copied out: the answers computed on request only stay in the graph.
    plain_asked = graph.run_requests([tokens[0]], {"label_id", "label", "confidence"})[0]
    assert sorted(plain_asked) == ["confidence", "label", "label_id"]
    for t, out in zip(tokens, got[::2]):
        want = post(plain(t))
        assert sorted(out) == sorted(want) and out["label"].dtype == np.object_
        np.testing.assert_allclose(out["logits"], plain(t)["logits"], atol=1e-5, rtol=0)
        assert np.array_equal(out["label_id"], want["label_id"]) and out["label"].tolist() == want["label"].tolist()
        np.testing.assert_allclose(out["confidence"], want["confidence"], atol=1e-5, rtol=0)


@pytest.mark.parametrize("which", ["seq_cls", "token_cls"])
def test_tokenizer_in_model_answers_what_the_two_steps_answer(which, request):
    from google.protobuf.json_format import MessageToDict

    pipeline = request.getfixturevalue("tiny_pipeline" if which == "seq_cls" else "tiny_token_pipeline")
    folder = request.getfixturevalue("step_dirs" if which == "seq_cls" else "token_step_dirs")
    merged_config, post_config, _ = task_configs(
        resolve_options(pipeline.static.spec, BuildOptions(runtime="python", layout="tokenizer-in-model")),
        pipeline.onnx,
    )
    merged_config = MessageToDict(merged_config, preserving_proto_field_name=True)
    merged = TokenizerOnnxStep(merged_config, folder)
    tokenizer = TokenizerStep({**merged_config, "output": []}, folder)  # its parameters: stride, max_seq_len
    model = OnnxStep({"input": [{"name": n} for n in merged.inputs]}, folder)
    requests = [
        {"text": _texts("国足公布世预赛名单")},
        {"text": _texts(" ")},
        {"text": _texts("股市 abc", "中国" * 90)},
    ]
    results = merged.run_requests(requests)
    assert isinstance(results[1], ErnieDeployError) and "text 0 is empty" in str(results[1])
    names = [o["name"] for o in merged_config["output"]]
    for req, got in zip(requests[::2], results[::2]):
        tokens = tokenizer(req, set(names) | set(merged.inputs))
        want = {**{n: tokens[n] for n in names if n in tokens}, **model({n: tokens[n] for n in merged.inputs})}
        assert sorted(got) == sorted(names)
        for name in names:
            np.testing.assert_allclose(got[name], want[name], atol=1e-5, err_msg=name)


@pytest.fixture
def token_step_dirs(tiny_token_pipeline, tmp_path):
    return _step_files(tiny_token_pipeline, tmp_path)


@pytest.fixture
def step_dirs(tiny_pipeline, tmp_path):
    return _step_files(tiny_pipeline, tmp_path)


@pytest.mark.parametrize("runtime", ["python", "onnxruntime"])
def test_graph_postprocess_configs_come_from_the_graph_signature(tiny_pipeline, runtime):
    from ernie_deploy.repository.configs import parse, render

    options = BuildOptions(runtime=runtime, layout="graph-postprocess")
    model = ModelSpec.new(SEQ_CLS, labels=("x",) * 10)
    configs = [parse(render(c)) for c in task_configs(resolve_options(model, options), tiny_pipeline.onnx)]
    tokenizer, model, ensemble = configs
    outputs = {o.name: (o.data_type, list(o.dims)) for o in model.output}
    from tritonclient.grpc import model_config_pb2 as mc

    assert outputs == {
        "label_id": (mc.TYPE_INT64, [1]),
        "label": (mc.TYPE_STRING, [1]),
        "confidence": (mc.TYPE_FP32, [1]),
        "probabilities": (mc.TYPE_FP32, [10]),
        "logits": (mc.TYPE_FP32, [10]),
    }
    assert [s.model_name for s in ensemble.ensemble_scheduling.step] == [tokenizer.name, model.name]
    assert {o.name for o in ensemble.output} == {o.name for o in SEQ_CLS.outputs}


@pytest.mark.parametrize(
    "task, options, message",
    [
        (TOKEN_CLS, {"layout": "graph-postprocess"}, "not expressed as an ONNX graph"),
        (SEQ_CLS, {"layout": "graph-postprocess", "classic": True}, "fixed-shape baseline of the ensemble"),
        (SEQ_CLS, {"layout": "fused", "classic": True}, "--layout ensemble"),
        (SEQ_CLS, {"layout": "tokenizer-in-model", "runtime": "onnxruntime"}, "--runtime python"),
        (SEQ_CLS, {"layout": "fused", "runtime": "onnxruntime"}, "--runtime python"),
        (SEQ_CLS, {"layout": "graph-postprocess", "long_text": "window"}, "window"),
        (SEQ_CLS, {"layout": "pipeline"}, "unknown layout"),
    ],
)
def test_layouts_that_do_not_combine_are_refused(tiny_pipeline, task, options, message):
    with pytest.raises(ErnieDeployError, match=message) as caught:
        check_build_options(BuildOptions(**{"runtime": "python", **options}))
        model = ModelSpec.new(task, labels=("x",) * 10)
        task_configs(resolve_options(model, BuildOptions(**{"runtime": "python", **options})), tiny_pipeline.onnx)
    assert caught.value.fix


def test_pairs_have_the_graph_postprocess_too():
    assert PAIR_CLS.graph_postprocess == SEQ_CLS.graph_postprocess and not TOKEN_CLS.graph_postprocess


def test_levers_pick_by_build_option():
    from benchmarks.levers import LEVERS, pick_levers

    picked = pick_levers(["fused", "graph_postprocess", "tokenizer-in-model"])
    assert [o for o in picked.values()] == [
        {},
        {"layout": "fused"},
        {"layout": "fused", "ort_spinning": "always"},
        {"layout": "graph-postprocess"},
        {"layout": "tokenizer-in-model"},
    ]
    assert [o for o in pick_levers(["ort_spinning"]).values()] == [
        {},
        {"ort_spinning": "run"},
        {"ort_spinning": "always"},
        {"layout": "fused", "ort_spinning": "always"},
    ]
    assert pick_levers(None) is LEVERS
    with pytest.raises(ErnieDeployError, match="no lever sets"):
        pick_levers(["fussed"])
