"""Served embed and rerank models at real ERNIE 3.0 shapes (random weights, paddlenlp's own configurations) answer
what their checkpoints' own Paddle code answers: cosine >= 0.99999 and max abs diff <= 1e-4 for vectors, within 1e-5
and in the same order for scores. nano runs in the suite; ERNIE_DEPLOY_RETRIEVAL_SHAPES=nano,mini,medium,base runs
the others too (each prints what it measured)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from ernie_deploy.client.grpc_client import Client, decode_outputs
from ernie_deploy.core.tasks import EMBED, RERANK
from ernie_deploy.server.process import TritonServer
from tests.retrieval_fixtures import PARITY_TEXTS, _parity_file, ernie_deploy, make_checkpoint, reference

pytestmark = pytest.mark.integration

SHAPES = os.environ.get("ERNIE_DEPLOY_RETRIEVAL_SHAPES", "nano").split(",")
QUERIES = [q for q, _ in PARITY_TEXTS]
PASSAGES = [p for _, p in PARITY_TEXTS]
# Texts past the longest above, so that every shape reads padded batches.
LONG = ["保险" * 60, "人寿保险的现金价值如何计算？" * 5]


@pytest.mark.parametrize("shape", SHAPES)
def test_served_answers_equal_paddles_at_real_shapes(shape, tmp_path):
    texts = QUERIES + PASSAGES + LONG
    sources = {
        form: make_checkpoint(form, tmp_path / "sources" / form, shape=shape)
        for form in ("rocketqa_tower", "cross_encoder")
    }
    parity = _parity_file(tmp_path)
    for form, task, name in (("rocketqa_tower", "embed", "towers"), ("cross_encoder", "rerank", "ranker")):
        ernie_deploy(
            "add", "--task", task, "--model", name, "--source", str(sources[form]),
            "--repository", str(tmp_path / "models"), "--parity-data", str(parity), cwd=tmp_path,
        )  # fmt: skip
    with TritonServer(tmp_path / "models", http_port=0, grpc_port=0, metrics_port=0, log_file=tmp_path / "log") as s:
        with Client(EMBED, s.grpc_url, model="towers") as client:
            vectors = np.stack(decode_outputs(EMBED, client.infer(texts)))
        with Client(RERANK, s.grpc_url, model="ranker") as client:
            scores = np.array(decode_outputs(RERANK, client.infer(list(zip(QUERIES, PASSAGES)))))
    theirs = reference("rocketqa_tower", sources["rocketqa_tower"], texts)
    cosine = (vectors * theirs).sum(-1) / np.linalg.norm(vectors, axis=-1) / np.linalg.norm(theirs, axis=-1)
    ranked = reference("cross_encoder", sources["cross_encoder"], QUERIES, PASSAGES)
    print(
        f"{shape}: vectors least cosine {cosine.min():.8f}, max abs diff {np.abs(vectors - theirs).max():.2e}; "
        f"scores max abs diff {np.abs(scores - ranked).max():.2e}"
    )
    assert cosine.min() >= 0.99999
    assert np.abs(vectors - theirs).max() <= 1e-4
    assert np.abs(scores - ranked).max() <= 1e-5
    assert list(np.argsort(-scores, kind="stable")) == list(np.argsort(-ranked, kind="stable"))
