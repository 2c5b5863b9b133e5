"""The long-text accuracy gate, on a real tritonserver: the bootstrap NER model served with its default sliding
window over the msra_docs test documents (300 to 3,000 characters) scores what Paddle-native scores on them with
the same windows (within 0.001), and within a point of its own sentence-level F1; cutting the same documents at
max_seq_len, measured here too, loses most of their entities."""

from __future__ import annotations

import pytest

from ernie_deploy.client.grpc_client import Client
from ernie_deploy.core.tasks import TOKEN_CLS

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def docs():
    from ernie_deploy.fetch.data import prepare, read_split

    return read_split(prepare("msra_docs"), "test", "jsonl")


@pytest.fixture(scope="module")
def paddle_scores(token_cls_pipeline, docs):
    """Paddle-native entity F1: MSRA test sentences; documents in windows; documents cut at max_seq_len."""
    from ernie_deploy.evaluate.metrics import score
    from ernie_deploy.evaluate.offline import paddle_predictions, paddle_window_predictions
    from ernie_deploy.fetch.data import read_split
    from ernie_deploy.serving.windows import default_stride

    p = token_cls_pipeline
    texts, gold = read_split(p.data, "test", "jsonl")
    stride = default_stride(TOKEN_CLS.max_seq_len)
    labels = p.static.labels
    return {
        "sentences": score(TOKEN_CLS, texts, gold, paddle_predictions(TOKEN_CLS, p.static, texts), labels)["f1"],
        "window": score(TOKEN_CLS, *docs, paddle_window_predictions(TOKEN_CLS, p.static, docs[0], stride), labels)[
            "f1"
        ],
        "head": score(TOKEN_CLS, *docs, paddle_predictions(TOKEN_CLS, p.static, docs[0]), labels)["f1"],
    }


def test_served_windows_score_documents_as_paddle_and_as_sentences(server, docs, paddle_scores):
    from ernie_deploy.evaluate.metrics import score

    texts, gold = docs
    assert len(texts) >= 100 and min(map(len, texts)) >= 300 and max(map(len, texts)) <= 3000
    with Client(TOKEN_CLS, server.grpc_url) as client:
        out = client.infer(texts[:8])
        served = score(TOKEN_CLS, texts, gold, client.predict(texts, 4, progress=False))["f1"]
    assert not out["truncated"].any(), "windows read every token"
    assert abs(served - paddle_scores["window"]) <= 0.001, (served, paddle_scores)
    assert abs(served - paddle_scores["sentences"]) <= 0.01, (served, paddle_scores)
    # What the windows are for: cut at max_seq_len, most of a document's entities are never seen.
    assert paddle_scores["head"] < paddle_scores["window"] - 0.3, paddle_scores
