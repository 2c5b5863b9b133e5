"""Every label's probability and the raw logits, on request (core.tasks.ON_REQUEST): computed by the step only for a
request that names them, in every layout and both wires, on a real server through gRPC and the client script."""

from __future__ import annotations

import numpy as np
import pytest

from ernie_deploy.core.io import NATIVE, PADDLENLP
from ernie_deploy.core.tasks import MULTI_LABEL, SEQ_CLS
from ernie_deploy.kinds.multi_label.serving import MultiLabelPostprocess
from ernie_deploy.kinds.sequence.serving import SeqClsPostprocess
from ernie_deploy.repository.build import BuildOptions
from ernie_deploy.repository.layouts import LAYOUTS
from tests.conftest import artifacts

TEXTS = ["国足公布世预赛名单", "股市大涨", "abc 123 新闻", "体育" * 80]
ASKED = ("probabilities", "logits")


def _labels_dir(tmp_path, labels):
    import json

    (tmp_path / "labels.json").write_text(json.dumps(labels), encoding="utf-8")
    (tmp_path / "thresholds.json").write_text(json.dumps(dict.fromkeys(labels, 0.5)), encoding="utf-8")
    return tmp_path


def _check_distribution(out: dict) -> None:
    """Probabilities that sum to 1, whose argmax and max are the served label and confidence; logits that agree."""
    probabilities = out["probabilities"]
    np.testing.assert_allclose(probabilities.sum(-1), 1.0, atol=1e-4)
    assert np.array_equal(probabilities.argmax(-1), out["label_id"].reshape(-1))
    np.testing.assert_allclose(probabilities.max(-1), out["confidence"].reshape(-1), atol=1e-6)
    assert np.array_equal(out["logits"].argmax(-1), out["label_id"].reshape(-1))
    shifted = np.exp(out["logits"] - out["logits"].max(-1, keepdims=True))
    np.testing.assert_allclose(shifted / shifted.sum(-1, keepdims=True), probabilities, atol=1e-5)


def test_sequence_step_answers_probabilities_only_when_named(tmp_path):
    step = SeqClsPostprocess({}, _labels_dir(tmp_path, ["a", "b", "c"]))
    logits = np.array([[0.1, 2.0, -1.0], [3.0, 0.0, 0.5]], np.float32)
    plain = step({"logits": logits}, {"label_id", "label", "confidence"})
    assert "probabilities" not in plain and "logits" not in plain
    out = step({"logits": logits}, {"label_id", "confidence", *ASKED})
    _check_distribution(out)
    assert out["probabilities"].dtype == np.float32 and out["probabilities"].shape == (2, 3)


def test_multi_label_probabilities_are_its_scores(tmp_path):
    step = MultiLabelPostprocess({}, _labels_dir(tmp_path, ["a", "b", "c"]))
    logits = np.array([[0.1, 2.0, -1.0], [3.0, 0.0, 0.5]], np.float32)
    assert "probabilities" not in step({"logits": logits}, {"labels", "scores"})
    out = step({"logits": logits}, {"scores", *ASKED})
    assert np.array_equal(out["probabilities"], out["scores"])
    np.testing.assert_allclose(out["probabilities"], 1 / (1 + np.exp(-logits)), atol=1e-6)
    assert np.array_equal(out["logits"], logits)


def test_the_logits_the_caller_reads_have_one_producer(tiny_pipeline):
    """The postprocess passes the logits through, and reads the model step's under an ensemble name of their own:
    Triton prunes a tensor a step and the caller both read when the caller leaves it out, and the request hangs."""
    from ernie_deploy.repository.layouts import task_configs
    from ernie_deploy.repository.resolve import resolve_options

    for layout in ("ensemble", "tokenizer-in-model"):
        model = resolve_options(artifacts(tiny_pipeline, "news").model, BuildOptions(runtime="python", layout=layout))
        *steps, ensemble = task_configs(model, tiny_pipeline.onnx)
        produced = [name for s in ensemble.ensemble_scheduling.step for name in s.output_map.values()]
        assert produced.count("logits") == 1 and len(produced) == len(set(produced))
        post = ensemble.ensemble_scheduling.step[-1]
        assert post.output_map["logits"] == "logits" and post.input_map["logits"] != "logits"


@pytest.fixture(scope="module")
def scored(tmp_path_factory, tiny_pipeline):
    """The tiny classifier in every layout and both wires, on one real server."""
    from ernie_deploy.repository.build import build
    from ernie_deploy.server.process import TritonServer

    repo = tmp_path_factory.mktemp("scores") / "models"
    names = {}
    for layout in LAYOUTS:
        for io in (NATIVE, PADDLENLP):
            name = f"s_{layout.replace('-', '_')}_{'pn' if io == PADDLENLP else 'own'}"
            build([artifacts(tiny_pipeline, name)], repo, BuildOptions(runtime="python", layout=layout, io=io))
            names[(layout, io)] = name
    with TritonServer(repo, http_port=0, grpc_port=0, metrics_port=0, log_file=repo.parent / "server.log") as server:
        yield server, repo, names


@pytest.mark.integration
@pytest.mark.parametrize("io", [NATIVE, PADDLENLP])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_every_layout_and_wire_answers_the_distribution_on_request(layout, io, scored):
    from ernie_deploy.client.grpc_client import Client
    from ernie_deploy.repository.served import served_model

    server, repo, names = scored
    record = served_model(repo, names[(layout, io)])
    with Client(SEQ_CLS, server.grpc_url, model=record) as plain:
        answered = plain.infer(TEXTS)
    assert "probabilities" not in answered and "logits" not in answered  # not named, not sent
    with Client(SEQ_CLS, server.grpc_url, model=record, asked=ASKED) as client:
        client.check_ready()
        out = client.infer(TEXTS)
    _check_distribution(out)
    assert out["probabilities"].shape == (len(TEXTS), len(record.labels))
    assert np.array_equal(out["label_id"], answered["label_id"])


@pytest.mark.integration
def test_the_client_script_prints_every_label(scored, capsys):
    from ernie_deploy.evaluate.served import main

    server, repo, names = scored
    argv = ["--grpc-url", server.grpc_url, "--model", names[("ensemble", NATIVE)], "--text", TEXTS[0], "--all-scores"]
    assert main(SEQ_CLS, argv) == 0
    lines = capsys.readouterr().out.splitlines()
    label, confidence = lines[0].split("\t")[:2]
    scores = [line.strip().split("\t") for line in lines[1:]]
    assert len(scores) == 10 and scores[0] == [label, confidence]  # best first: the served label
    assert abs(sum(float(p) for _, p in scores) - 1) < 1e-3  # printed to 4 places


@pytest.mark.integration
def test_multi_label_answers_its_sigmoids_on_request(every_kind_server):
    from ernie_deploy.client.grpc_client import Client

    with Client(MULTI_LABEL, every_kind_server.grpc_url, asked=ASKED) as client:
        out = client.infer(TEXTS)
    assert np.array_equal(out["probabilities"], out["scores"])
    np.testing.assert_allclose(out["probabilities"], 1 / (1 + np.exp(-out["logits"])), atol=1e-5)
