"""The long-text accuracy gate, on a real tritonserver: the bootstrap NER model served as `build` serves it by
default (sentence windows of the length it was trained on) over the msra_docs test documents (300 to 3,000
characters) scores what Paddle-native scores on them read the same way (within 0.001), and within 0.03 of its own
sentence-level F1; cutting the same documents at max_seq_len, measured here too, loses most of their entities.

Why 0.03: a model trained on the machine differs from one machine to the next (float sums), and the gap between its
document and sentence F1 moves with it: 0.0031 and 0.008 on two machines' models (docs/LONG_TEXTS.md); 0.03 holds a
retrain and still fails a reading that loses entities at the windows' edges (sliding windows of 128 lost 19 points)."""

from __future__ import annotations

import pytest

from ernie_deploy.client.grpc_client import Client
from ernie_deploy.core.tasks import TOKEN_CLS
from ernie_deploy.export.gates import within
from tests.conftest import artifacts

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def window_server(token_cls_pipeline, tmp_path_factory):
    from ernie_deploy.repository.build import BuildOptions, build
    from ernie_deploy.server.process import TritonServer

    p = token_cls_pipeline
    repo = tmp_path_factory.mktemp("window_models")
    entry = artifacts(p)
    # up to 8 documents of up to 3,000 characters per request: within the default request limit of a windowed model
    build(entry, repo, BuildOptions(runtime="python", layout="ensemble"))
    with TritonServer(repo, http_port=0, grpc_port=0, metrics_port=0, log_file=repo.parent / "server.log") as server:
        yield server


@pytest.fixture(scope="module")
def docs():
    from ernie_deploy.fetch.data import read_split
    from ernie_deploy.fetch.datasets import prepare

    return read_split(prepare("msra_docs"), "test", "jsonl")


@pytest.fixture(scope="module")
def paddle_scores(token_cls_pipeline, docs):
    """Paddle-native entity F1: MSRA test sentences; documents in windows; documents cut at max_seq_len."""
    from ernie_deploy.evaluate.metrics import score
    from ernie_deploy.evaluate.offline import paddle_predictions
    from ernie_deploy.fetch.data import read_split

    p = token_cls_pipeline
    texts, gold = read_split(p.data, "test", "jsonl")
    labels = p.static.labels
    # the export's record reads as `build` serves it by default: in windows of the length the model was trained on
    windows = paddle_predictions(p.static.spec, p.static, docs[0])
    head = p.static.spec.updated(long_text="head")  # cut at max_seq_len
    return {
        "sentences": score(TOKEN_CLS, texts, gold, paddle_predictions(head, p.static, texts), labels)["f1"],
        "window": score(TOKEN_CLS, *docs, windows, labels)["f1"],
        "head": score(TOKEN_CLS, *docs, paddle_predictions(head, p.static, docs[0]), labels)["f1"],
    }


def test_served_windows_score_documents_as_paddle_and_as_sentences(window_server, docs, paddle_scores):
    from ernie_deploy.evaluate.metrics import score

    texts, gold = docs
    assert len(texts) >= 100 and min(map(len, texts)) >= 300 and max(map(len, texts)) <= 3000
    with Client(TOKEN_CLS, window_server.grpc_url) as client:
        out = client.infer(texts[:8])
        served = score(TOKEN_CLS, texts, gold, client.predict(texts, 4, progress=False))["f1"]
    assert not out["truncated"].any(), "windows read every token"
    # Entity F1 is no fraction of the texts: within a tenth of a point, sparing float rounding.
    assert within(served, paddle_scores["window"], 0.001), (served, paddle_scores)
    # The shipped tagger reads documents 0.79 points under its sentences (docs/long_texts_demo.json): a point at most.
    assert within(served, paddle_scores["sentences"], 0.01), (served, paddle_scores)
    # What the windows are for: cut at max_seq_len, most of a document's entities are never seen.
    assert paddle_scores["head"] < paddle_scores["window"] - 0.3, paddle_scores
