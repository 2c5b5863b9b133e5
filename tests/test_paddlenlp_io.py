"""`build --io paddlenlp`: a model answers in the tensors of PaddleNLP's ERNIE 3.0 Triton pipeline, in every layout,
with the same answers as in its own tensors; a client written to that pipeline's contract (tests/drop_in) runs
unchanged against the demo models and scores what ernie-deploy's own client scores."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

from ernie_deploy.core.errors import BadOptionsError, ErnieDeployError
from ernie_deploy.core.io import NATIVE, PADDLENLP, wire
from ernie_deploy.core.tasks import MULTI_LABEL, PAIR_CLS, SEQ_CLS, TOKEN_CLS
from ernie_deploy.repository.layouts import LAYOUTS
from ernie_deploy.repository.options import BuildOptions
from ernie_deploy.repository.resolve import resolves
from ernie_deploy.serving.entity_scores import without_scores
from tests.conftest import NEWS_TEXTS, ROOT, artifacts

CLIENT = ROOT / "tests" / "drop_in" / "paddlenlp_triton_client.py"
NER_TEXTS = ["新华社北京电，国务院总理李鹏今天在人民大会堂会见了日本客人。", "张三2008年在上海 iPhone 店工作", "中国"]


def test_the_paddlenlp_wire_of_each_kind():
    seq = wire(SEQ_CLS, PADDLENLP)
    assert [(t.name, t.data_type) for t in seq.input_specs()] == [("INPUT", "BYTES")]
    assert [(t.name, t.data_type) for t in seq.read_specs()] == [("label", "INT64"), ("confidence", "FP32")]
    # every label's probability and the logits, under their own names, for a client that names them
    asked = [(t.name, t.data_type) for t in seq.read_specs({"probabilities", "logits"})]
    assert asked == [("label", "INT64"), ("confidence", "FP32"), ("probabilities", "FP32"), ("logits", "FP32")]
    assert [t.name for t in wire(PAIR_CLS, PADDLENLP).input_specs()] == ["INPUT", "INPUT_PAIR"]
    token = wire(TOKEN_CLS, PADDLENLP)
    assert [(t.name, t.data_type) for t in token.output_specs()] == [("OUTPUT", "BYTES")]
    assert token.reformatted == ("entities",)
    native = wire(SEQ_CLS)
    assert native.name == NATIVE and native.input_specs() == list(SEQ_CLS.inputs)
    with pytest.raises(BadOptionsError, match="no tensors for multi_label model") as caught:
        wire(MULTI_LABEL, PADDLENLP, "topics")
    assert "--io ernie-deploy" in caught.value.fix


def test_entities_go_out_with_an_inclusive_end_and_come_back_whole():
    from ernie_deploy.kinds.token.client import read_paddlenlp_entities
    from ernie_deploy.kinds.token.serving import paddlenlp_entities
    from ernie_deploy.serving.entities import entities_from_json, entities_to_json

    text = "张三在上海工作"
    native = [
        {"type": "PER", "start": 0, "end": 2, "text": "张三"},
        {"type": "LOC", "start": 3, "end": 5, "text": "上海"},
    ]
    written = paddlenlp_entities(entities_to_json(native))
    import ast

    assert ast.literal_eval(written.decode()) == [{"pos": [0, 1], "label": "PER"}, {"pos": [3, 4], "label": "LOC"}]
    assert entities_from_json(read_paddlenlp_entities(written, text)) == native
    with pytest.raises(ErnieDeployError, match="is not a JSON list of"):
        read_paddlenlp_entities(b"{'pos': 1}", text)
    with pytest.raises(ErnieDeployError, match="is not a JSON list of"):
        read_paddlenlp_entities(b"[__import__('os').system('true')]", text)  # never evaluated


@pytest.mark.parametrize("layout", [name for name in LAYOUTS if name != "graph-postprocess"])
def test_configs_take_input_and_answer_output(layout, tiny_token_pipeline):
    from ernie_deploy.repository.layouts import task_configs
    from ernie_deploy.repository.resolve import resolve_options

    model = replace(artifacts(tiny_token_pipeline, "ner").model, io=PADDLENLP)
    configs = task_configs(
        resolve_options(model, BuildOptions(runtime="python", layout=layout)), tiny_token_pipeline.onnx
    )
    entry = configs[-1]
    assert [t.name for t in entry.input] == ["INPUT"] and [t.name for t in entry.output] == ["OUTPUT"]


def test_a_multi_label_model_is_refused_by_name(tiny_pipeline, tmp_path):
    from ernie_deploy.repository.build import build

    labels = tiny_pipeline.static.spec.labels
    entry = artifacts(tiny_pipeline, "topics", task=MULTI_LABEL.name, thresholds=dict.fromkeys(labels, 0.5))
    with pytest.raises(BadOptionsError, match="no tensors for multi_label model 'topics'"):
        build([entry], tmp_path / "models", BuildOptions(runtime="python", io=PADDLENLP))
    assert not (tmp_path / "models" / "topics").exists()


@pytest.fixture(scope="module")
def wired(tmp_path_factory, tiny_pipeline, tiny_pipeline_v2, tiny_token_pipeline):
    """One server: the tiny classifier in every layout and the tiny NER model in every layout that fits it, each in
    PaddleNLP's wire (version 2 beside the classifiers' version 1), and both in their own tensors as references."""
    from ernie_deploy.repository.add_version import build_version
    from ernie_deploy.repository.build import build
    from ernie_deploy.server.process import TritonServer

    repo = tmp_path_factory.mktemp("paddlenlp_io") / "models"
    options = BuildOptions(runtime="python", layout="ensemble")
    build([artifacts(tiny_pipeline, "news"), artifacts(tiny_token_pipeline, "ner")], repo, options)
    names = {}
    for layout in LAYOUTS:
        suffix = layout.replace("-", "_")
        options = BuildOptions(runtime="python", layout=layout, io=PADDLENLP)
        names[("news", layout)] = f"pn_news_{suffix}"
        build([artifacts(tiny_pipeline, f"pn_news_{suffix}")], repo, options)
        build_version(artifacts(tiny_pipeline_v2, f"pn_news_{suffix}"), repo, replace(options, io=None), version=2)
        if resolves(artifacts(tiny_token_pipeline, "x").model, options):
            names[("ner", layout)] = f"pn_ner_{suffix}"
            build([artifacts(tiny_token_pipeline, f"pn_ner_{suffix}")], repo, options)
    cached = BuildOptions(runtime="python", layout="tokenizer-in-model", io=PADDLENLP, response_cache=True)
    build([artifacts(tiny_token_pipeline, "pn_ner_cached")], repo, cached)
    with TritonServer(repo, http_port=0, grpc_port=0, metrics_port=0, log_file=repo.parent / "server.log") as server:
        yield server, repo, names


def _served(repo, name):
    from ernie_deploy.repository.served import served_model

    return served_model(repo, name)


def _raw(url: str, name: str, texts: list[str], outputs: list[str]) -> dict:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url)
    data = np.array([t.encode() for t in texts], dtype=np.object_).reshape(-1, 1)
    tensor = grpcclient.InferInput("INPUT", list(data.shape), "BYTES")
    tensor.set_data_from_numpy(data)
    result = client.infer(name, [tensor], outputs=[grpcclient.InferRequestedOutput(o) for o in outputs])
    return {o: result.as_numpy(o) for o in outputs}


@pytest.mark.integration
@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_layout_answers_the_same_in_paddlenlp_tensors(layout, wired):
    from ernie_deploy.client.grpc_client import Client

    server, repo, names = wired
    with Client(SEQ_CLS, server.grpc_url, model="news") as client:
        native = client.infer(NEWS_TEXTS)
    name = names[("news", layout)]
    record = _served(repo, name)
    assert record.io == PADDLENLP and record.layout == layout
    got = _raw(server.grpc_url, name, NEWS_TEXTS, ["label", "confidence"])
    assert got["label"].dtype == np.int64 and got["label"][:, 0].tolist() == native["label_id"][:, 0].tolist()
    np.testing.assert_allclose(got["confidence"], native["confidence"], atol=1e-6)
    with Client(SEQ_CLS, server.grpc_url, model=record) as client:  # the record's wire, read back
        assert client.predict(NEWS_TEXTS, progress=False) == [x.decode() for x in native["label"][:, 0]]
    if ("ner", layout) in names:
        with Client(TOKEN_CLS, server.grpc_url, model="ner") as client:
            entities = client.predict(NER_TEXTS, progress=False)
        record = _served(repo, names[("ner", layout)])
        with Client(TOKEN_CLS, server.grpc_url, model=record) as client:  # PaddleNLP's OUTPUT carries no scores
            assert client.predict(NER_TEXTS, progress=False) == without_scores(entities)


@pytest.mark.integration
def test_the_pipelines_own_client_shape_reads_them(wired, tmp_path):
    """The drop-in client (PaddleNLP's contract only): ids and confidences as the model's own, entities with inclusive
    ends cutting the entity texts out of the text sent."""
    from ernie_deploy.client.grpc_client import Client

    server, repo, names = wired
    labels = list(_served(repo, "news").labels)
    data = tmp_path / "split.tsv"
    data.write_text("".join(f"{labels[i % len(labels)]}\t{t}\n" for i, t in enumerate(NEWS_TEXTS)), encoding="utf-8")
    args = ["--url", server.grpc_url, "--data", str(data), "--labels", ",".join(labels)]
    out = _run_client("seq_cls", *args, "--model", names[("news", "ensemble")])
    with Client(SEQ_CLS, server.grpc_url, model="news") as client:
        native = client.predict(NEWS_TEXTS, progress=False)
    assert [labels[i] for i in out["ids"]] == native
    gold = [labels[i % len(labels)] for i in range(len(NEWS_TEXTS))]
    assert out["accuracy"] == pytest.approx(sum(a == b for a, b in zip(native, gold)) / len(gold))
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(NER_TEXTS) + "\n", encoding="utf-8")
    out = _run_client("token_cls", "--url", server.grpc_url, "--texts", str(texts), "--model", names[("ner", "fused")])
    with Client(TOKEN_CLS, server.grpc_url, model="ner") as client:
        native = client.predict(NER_TEXTS, progress=False)
    assert [[(e["label"], e["text"]) for e in found] for found in out["entities"]] == [
        [(e["type"], e["text"]) for e in found] for found in native
    ]


def _run_client(*args) -> dict:
    done = subprocess.run([sys.executable, str(CLIENT), *args], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.integration
def test_limits_refuse_by_name_and_a_version_keeps_its_wire(wired, tiny_pipeline):
    from ernie_deploy.repository.add_version import build_version
    from ernie_deploy.repository.versions import VersionedModel

    server, repo, names = wired
    name = names[("news", "fused")]
    record = _served(repo, name)
    with pytest.raises(Exception, match="characters"):
        _raw(server.grpc_url, name, ["国" * (record.max_text_chars + 1)], ["label"])
    assert _raw(server.grpc_url, name, ["国足"], ["label"])["label"].shape == (1, 1), "the server stays up"
    assert VersionedModel.read(repo, name).on_disk() == [1, 2]
    with pytest.raises(BadOptionsError, match="answers its clients in the paddlenlp wire"):
        build_version(
            artifacts(tiny_pipeline, name), repo, BuildOptions(runtime="python", layout="fused", io=NATIVE), version=3
        )


@pytest.mark.integration
def test_a_cached_answer_is_the_answer_in_paddlenlp_tensors(wired):
    import re
    import urllib.request

    server, _, _ = wired
    first = _raw(server.grpc_url, "pn_ner_cached", NER_TEXTS, ["OUTPUT"])["OUTPUT"]
    again = _raw(server.grpc_url, "pn_ner_cached", NER_TEXTS, ["OUTPUT"])["OUTPUT"]
    assert first.tolist() == again.tolist() and first.shape == (len(NER_TEXTS), 1)
    metrics = urllib.request.urlopen(server.metrics_url, timeout=10).read().decode()
    hits = re.search(r'^nv_cache_num_hits_per_model{model="pn_ner_cached",version="1"} (\S+)$', metrics, re.M)
    assert hits and float(hits.group(1)) >= 1, "the second request came from the cache"


@pytest.fixture(scope="module")
def demo_server(tmp_path_factory, seq_cls_pipeline, token_cls_pipeline):
    """The demo models under their demo names in PaddleNLP's wire, as a user of that pipeline builds them, and the
    same models in ernie-deploy's own tensors beside them."""
    from ernie_deploy.repository.build import build, model_artifacts
    from ernie_deploy.server.process import TritonServer

    repo = tmp_path_factory.mktemp("paddlenlp_demo") / "models"
    pipelines = (seq_cls_pipeline, token_cls_pipeline)
    build([model_artifacts(p.static, p.onnx) for p in pipelines], repo, BuildOptions(runtime="python", io=PADDLENLP))
    native = [model_artifacts(p.static, p.onnx, f"own_{p.task.name}") for p in pipelines]
    build(native, repo, BuildOptions(runtime="python"))
    with TritonServer(repo, http_port=0, grpc_port=0, metrics_port=0, log_file=repo.parent / "server.log") as server:
        yield server


@pytest.mark.integration
def test_the_drop_in_client_scores_the_demo_models_as_the_own_client_does(
    demo_server, seq_cls_pipeline, token_cls_pipeline, tmp_path
):
    from ernie_deploy.client.grpc_client import Client
    from ernie_deploy.fetch.data import read_split, split_file

    test = split_file(seq_cls_pipeline.data, "test", SEQ_CLS.split_format)
    labels = ",".join(seq_cls_pipeline.static.spec.labels)
    drop_in = _run_client("seq_cls", "--url", demo_server.grpc_url, "--data", str(test), "--labels", labels)
    report = tmp_path / "own.json"
    own = subprocess.run(
        [sys.executable, str(ROOT / "clients" / "seq_cls_grpc_client.py"), "--grpc-url", demo_server.grpc_url]
        + ["--model", "own_seq_cls", "--data", str(test), "--report", str(report)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert own.returncode == 0, own.stderr[-2000:]
    scored = json.loads(report.read_text())
    print(f"drop-in accuracy {drop_in['accuracy']:.4f}, own client {scored['accuracy']:.4f} (n={drop_in['n']})")
    assert drop_in["n"] == 1000 and drop_in["accuracy"] == pytest.approx(scored["accuracy"], abs=1e-9)

    texts, _ = read_split(token_cls_pipeline.data, "test", TOKEN_CLS.split_format)
    texts = texts[:300]
    lines = tmp_path / "ner.txt"
    lines.write_text("\n".join(texts) + "\n", encoding="utf-8")
    drop_in = _run_client("token_cls", "--url", demo_server.grpc_url, "--texts", str(lines))
    with Client(TOKEN_CLS, demo_server.grpc_url, model="own_token_cls") as client:
        own = client.predict(texts, progress=False)
    assert sum(map(len, own)) > 100, "the demo NER model finds entities in the MSRA test sentences"
    assert [
        [(e["label"], e["pos"][0], e["pos"][1] + 1, e["text"]) for e in found] for found in drop_in["entities"]
    ] == [[(e["type"], e["start"], e["end"], e["text"]) for e in found] for found in own]
