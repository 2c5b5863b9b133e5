"""Text pairs (pair_cls): the title-pair data, the tokenizer step's two inputs and their errors, the client's
pair items, and a tiny pair model served by a real tritonserver in both layouts."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest

from ernie_deploy.client.grpc_client import Client, TextError, input_columns
from ernie_deploy.core.errors import BadRequest, ErnieDeployError
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.core.tasks import DEMO_MODELS, PAIR_CLS, SEQ_CLS
from ernie_deploy.fetch import data, datasets
from ernie_deploy.serving.limits import ReadingLimits
from ernie_deploy.serving.pipeline import PipelineStep
from ernie_deploy.serving.tokenizer_steps import TokenizerStep

from .conftest import artifacts, make_tiny_checkpoint, run_stages

PAIR_LABELS = ["different", "same"]


def _texts(*items):
    return np.array([t.encode("utf-8") for t in items], dtype=np.object_).reshape(-1, 1)


def test_title_pairs_are_balanced_seeded_and_labelled_by_class():
    rows = [(label, f"{label} title {i}") for label in ("a", "b", "c") for i in range(7)]
    pairs = datasets.title_pairs(rows, random.Random(1))
    assert pairs == datasets.title_pairs(rows, random.Random(1)) and len(pairs) == len(rows)
    assert Counter(label for label, _, _ in pairs) == {"same": 11, "different": 10}
    assert sorted(first for _, first, _ in pairs) == sorted(title for _, title in rows)  # each title once first
    cls = {title: label for label, title in rows}
    for label, first, second in pairs:
        assert first != second and (cls[first] == cls[second]) == (label == "same")


def test_pair_splits_use_only_their_own_split_titles(thucnews):
    pairs = datasets.prepare("thucnews_pairs")
    for split in data.SPLITS:
        titles = set(data.read_split(thucnews, split, "tsv")[0])
        items, labels = data.read_split(pairs, split, "tsv")
        assert len(items) == len(titles) and Counter(labels)["same"] == len(items) // 2
        assert all(isinstance(i, tuple) and i[0] in titles and i[1] in titles for i in items)


def test_pair_tsv_round_trip_and_bad_rows(tmp_path):
    path = tmp_path / "pairs.tsv"
    data.write_tsv(path, [("same", "国足\t公布", "名单"), ("different", "股市", "大涨")])
    assert data.read_split_file(path) == ([("国足\t公布", "名单"), ("股市", "大涨")], ["same", "different"])
    path.write_text("label\ttext\ttext_pair\nsame\tonly one\n", encoding="utf-8")
    with pytest.raises(ErnieDeployError, match="pairs.tsv:2: expected 3 tab-separated fields, got 2"):
        data.read_split_file(path)
    path.write_text("label\ttext\tpair\n", encoding="utf-8")
    with pytest.raises(ErnieDeployError, match="expected a `label<TAB>text`, `label<TAB>text<TAB>text_pair`"):
        data.read_split_file(path)


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory):
    work = tmp_path_factory.mktemp("tiny_pair")
    return run_stages(PAIR_CLS, make_tiny_checkpoint(work / "checkpoint", PAIR_LABELS, task=PAIR_CLS), work)


@pytest.fixture
def pair_dir(tiny_pair, tmp_path):
    from ernie_deploy.serving.tokenizer import save_tokenizer

    save_tokenizer(tiny_pair.static.vocab_file, tmp_path / "tokenizer.json")
    (tmp_path / "labels.json").write_text('["different", "same"]')
    (tmp_path / "model.onnx").write_bytes(tiny_pair.onnx.read_bytes())
    return tmp_path


PAIR_CONFIG = {
    "input": [{"name": "text"}, {"name": "text_pair"}],
    # max_seq_len, and the request limits `build` writes by default
    "parameters": {k: {"string_value": str(v)} for k, v in {"max_seq_len": 24, **ReadingLimits().parameters()}.items()},
}


def test_tokenizer_step_encodes_pairs_as_encode_pairs(pair_dir):
    from ernie_deploy.serving.encoding import encode_pairs
    from ernie_deploy.serving.tokenizer import load_tokenizer

    step = TokenizerStep(PAIR_CONFIG, pair_dir)
    texts, pairs = ["国足公布世预赛名单", "股市" * 20], ["美元 1.5亿", "中国"]
    out = step({"text": _texts(*texts), "text_pair": _texts(*pairs)})
    want = encode_pairs(load_tokenizer(pair_dir / "tokenizer.json"), texts, pairs, 24)
    assert np.array_equal(out["input_ids"], want.input_ids)
    assert np.array_equal(out["token_type_ids"], want.token_type_ids) and out["token_type_ids"].max() == 1
    assert out["truncated"][:, 0].tolist() == [False, True]


@pytest.mark.parametrize(
    "inputs, message",
    [
        ({"text": _texts("国足"), "text_pair": _texts(" ")}, "text_pair 0 is empty"),
        ({"text": _texts("", "股市"), "text_pair": _texts("名单", "")}, "text 0 is empty; text_pair 1 is empty"),
        ({"text": _texts("国足", "股市"), "text_pair": _texts("名单")}, "2 text and 1 text_pair elements"),
        ({"text": _texts("国足"), "text_pair": None}, "no 'text_pair' input"),
    ],
)
def test_tokenizer_step_names_the_bad_side_of_a_pair(pair_dir, inputs, message):
    step = TokenizerStep(PAIR_CONFIG, pair_dir)
    with pytest.raises(BadRequest, match=message):
        step(inputs)


def test_a_bad_pair_fails_alone_in_a_merged_batch(pair_dir):
    step = TokenizerStep(PAIR_CONFIG, pair_dir)
    good = {"text": _texts("国足"), "text_pair": _texts("名单")}
    results = step.run_requests([good, {"text": _texts("股市"), "text_pair": _texts("")}, good])
    assert isinstance(results[1], BadRequest) and "text_pair 0 is empty" in str(results[1])
    assert np.array_equal(results[0]["input_ids"], results[2]["input_ids"])


def test_fused_pipeline_reads_both_texts(pair_dir):
    config = {
        **PAIR_CONFIG,
        "output": [{"name": "label"}, {"name": "confidence"}],
        "parameters": {**PAIR_CONFIG["parameters"], "postprocess": {"string_value": "seq_cls_postprocess"}},
    }
    pipeline = PipelineStep(config, pair_dir)
    one = pipeline({"text": _texts("国足", "股市"), "text_pair": _texts("名单", "大涨")})
    swapped = pipeline({"text": _texts("名单", "大涨"), "text_pair": _texts("国足", "股市")})
    assert one["label"].shape == (2, 1) and not np.array_equal(one["confidence"], swapped["confidence"])


def test_client_items_must_fit_the_model():
    assert input_columns(PAIR_CLS, [("a", "b"), ("c", "d")]) == [["a", "c"], ["b", "d"]]
    assert input_columns(SEQ_CLS, ["a", "b"]) == [["a", "b"]]
    with pytest.raises(ErnieDeployError, match="takes text and text_pair per item"):
        input_columns(PAIR_CLS, ["a"])
    with pytest.raises(ErnieDeployError, match="takes one text"):
        input_columns(SEQ_CLS, [("a", "b")])


@pytest.mark.integration
@pytest.mark.parametrize("fused", [False, True], ids=["ensemble", "fused"])
def test_served_pairs_equal_offline_onnx(tiny_pair, tmp_path, fused):
    """A pair model on a real tritonserver, both layouts: the ensemble takes `text` and `text_pair`, answers what
    onnxruntime answers offline (order within a pair matters), names a bad side, and refuses a missing pair."""
    import tritonclient.grpc as grpcclient

    from ernie_deploy.evaluate.offline import onnx_predictions
    from ernie_deploy.repository.build import build
    from ernie_deploy.repository.options import BuildOptions
    from ernie_deploy.server.process import TritonServer

    p = tiny_pair
    repo = tmp_path / "models"
    build(
        [artifacts(p)],
        repo,
        BuildOptions(runtime="python", layout="fused" if fused else "ensemble"),
    )
    items = [("国足公布世预赛名单", "股市大涨"), ("股市大涨", "国足公布世预赛名单"), ("美元 1.5亿", "体育" * 90)]
    with TritonServer(repo, http_port=0, grpc_port=0, metrics_port=0, log_file=tmp_path / "server.log") as server:
        with Client(PAIR_CLS, server.grpc_url) as client:
            client.check_ready()
            served = client.predict(items, progress=False)
            assert client.infer(items)["label"].shape == (3, 1)
            assert client.predict([items[0], ("股市", " ")], progress=False, keep_going=True) == [
                served[0],
                TextError(1, "text_pair is empty"),
            ]
            with pytest.raises(BadRequest, match="text_pair 0 is empty"):
                client.infer([("国足", "")])
            text = grpcclient.InferInput("text", [1, 1], "BYTES")
            text.set_data_from_numpy(np.array([[b"abc"]], dtype=np.object_))
            with pytest.raises(Exception, match="missing required input.*text_pair"):
                client.client.infer(DEMO_MODELS[PAIR_CLS.name], [text])
            assert client.predict(items[:1], progress=False) == served[:1]  # the server is still up
        from ernie_deploy.server.probe import probe

        assert [(r.model, r.ok) for r in probe(server.http_url)] == [(DEMO_MODELS[PAIR_CLS.name], True)]  # liveness
        from ernie_deploy.operate.rollout import PROBE_TEXTS, canary_probe

        canary_probe(server.grpc_url)(ModelSpec.new(PAIR_CLS), PROBE_TEXTS)  # a rollout's probe of a pair model passes
    assert served == onnx_predictions(p.static.spec, p.onnx, p.static.vocab_file, items)


def test_bench_and_soak_inputs_read_pairs(tmp_path):
    """The test items soak and bench draw from: pairs whose both sides hold text (a blank side is left out)."""
    from ernie_deploy.evaluate.inputs import ModelInputs

    path = tmp_path / "pairs.tsv"
    data.write_tsv(path, [("same", "国足", "名单"), ("different", " ", "股市"), ("same", "美元", "亿")])
    assert ModelInputs.texts_of(PAIR_CLS, data=path) == [("国足", "名单"), ("美元", "亿")]
    assert ModelInputs.texts_of(PAIR_CLS, max_texts=1, data=path) == [("国足", "名单")]
