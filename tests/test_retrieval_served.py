"""The embed and rerank models served by a real tritonserver answer what their checkpoints' own Paddle code answers
(tests/retrieval_fixtures.py), through the gRPC client and the client scripts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ernie_deploy.client.grpc_client import Client, decode_outputs
from ernie_deploy.core.tasks import EMBED, RERANK
from tests.retrieval_fixtures import PARITY_TEXTS, SERVED, reference

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
QUERIES = [q for q, _ in PARITY_TEXTS]
PASSAGES = [p for _, p in PARITY_TEXTS]


def _served(server, task, model: str, items, asked=()) -> dict:
    with Client(task, server.grpc_url, model=model, asked=asked) as client:
        return client.infer(items)


@pytest.mark.parametrize("model", [name for name, (_, task, _) in SERVED.items() if task == "embed"])
def test_served_vectors_are_the_checkpoints_own(retrieval_server, retrieval_work, model):
    form = SERVED[model][0]
    out = _served(retrieval_server, EMBED, model, QUERIES + PASSAGES)
    ours = np.stack(decode_outputs(EMBED, out))
    theirs = reference(form, retrieval_work / "sources" / form, QUERIES + PASSAGES)
    cosine = (ours * theirs).sum(-1) / np.linalg.norm(ours, axis=-1) / np.linalg.norm(theirs, axis=-1)
    assert cosine.min() >= 0.99999
    assert np.abs(ours - theirs).max() <= 1e-4
    # Each text's tokens and whether it was cut come with its vector (the gateway's usage counts and refusals).
    assert out["lengths"].reshape(-1).tolist()[0] == len(QUERIES[0]) + 2
    assert not out["truncated"].any()


def test_served_scores_are_the_cross_encoders_own(retrieval_server, retrieval_work):
    out = _served(retrieval_server, RERANK, "ernie_rerank", list(zip(QUERIES, PASSAGES)), asked=("logits",))
    ours = np.array(decode_outputs(RERANK, out))
    theirs = reference("cross_encoder", retrieval_work / "sources" / "cross_encoder", QUERIES, PASSAGES)
    assert np.abs(ours - theirs).max() <= 1e-5
    assert list(np.argsort(-ours, kind="stable")) == list(np.argsort(-theirs, kind="stable"))
    # The logit asked for is the one the score is the sigmoid of.
    assert np.allclose(1 / (1 + np.exp(-out["logits"].reshape(-1))), ours, atol=1e-6)


def test_a_raw_scoring_model_answers_its_logit(retrieval_server, retrieval_work):
    out = _served(retrieval_server, RERANK, "raw_rerank", list(zip(QUERIES, PASSAGES)))
    raw = np.array(decode_outputs(RERANK, out))
    theirs = reference("seq_cls_1", retrieval_work / "sources" / "seq_cls_1", QUERIES, PASSAGES)  # its sigmoid
    assert np.abs(1 / (1 + np.exp(-raw)) - theirs).max() <= 1e-5
    assert np.abs(raw).max() > 0  # a logit, not a probability squeezed to one value


def _client(script: str, server, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, f"clients/{script}", "--grpc-url", server.grpc_url, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_client_scripts_print_vectors_rankings_and_retrieval_scores(retrieval_server, tmp_path):
    run = _client("embed_grpc_client.py", retrieval_server, "--text", QUERIES[0], "--text", PASSAGES[0])
    assert run.returncode == 0, run.stderr
    lines = run.stdout.strip().splitlines()
    assert [line.split("\t")[0] for line in lines] == ["dim 48", "dim 48"]
    assert lines[1].endswith(PASSAGES[0])

    texts = PASSAGES[:4]
    run = _client(
        "rerank_grpc_client.py", retrieval_server, "--query", QUERIES[0], *sum((["--text", t] for t in texts), [])
    )
    assert run.returncode == 0, run.stderr
    scores = [float(line.split("\t")[0]) for line in run.stdout.strip().splitlines()]
    assert len(scores) == 4 and scores == sorted(scores, reverse=True)

    split = tmp_path / "pairs.tsv"
    split.write_text("query\tpassage\n" + "".join(f"{q}\t{p}\n" for q, p in PARITY_TEXTS), encoding="utf-8")
    run = _client("embed_grpc_client.py", retrieval_server, "--data", str(split))
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines()[-1].startswith("mrr_at_10: ")
    run = _client("rerank_grpc_client.py", retrieval_server, "--data", str(split), "--candidates", "4")
    assert run.returncode == 0, run.stderr
    assert "embed_mrr_at_10: " in run.stdout and run.stdout.strip().splitlines()[-1].startswith("mrr_at_10: ")
    # A gate the scores cannot reach exits 3, as the other clients' --min-score.
    run = _client("embed_grpc_client.py", retrieval_server, "--data", str(split), "--min-score", "1.01")
    assert run.returncode == 3


def test_a_second_version_of_an_embed_model_rolls_out_under_a_shadow(retrieval_work, tmp_path):
    """`build --version 2` of an embed model beside the serving one, then `rollout --shadow` while clients call it:
    the shadow compares the two versions' vectors (the kind's watch: unit vectors to 2 places) and switches."""
    import os
    import shutil
    import threading

    from ernie_deploy.server.process import TritonServer

    repository = tmp_path / "models"
    shutil.copytree(retrieval_work / "models", repository)
    env = {**os.environ, "ERNIE_DEPLOY_ARTIFACTS": str(retrieval_work / "artifacts")}
    cli = [sys.executable, "-m", "ernie_deploy.cli"]
    build = [*cli, "build", "--repository", str(repository), "--model", "ernie_embed", "--version", "2"]
    subprocess.run(build, cwd=tmp_path, env=env, check=True, capture_output=True)
    with TritonServer(repository, http_port=0, grpc_port=0, metrics_port=0, log_file=tmp_path / "log") as server:
        done = threading.Event()

        def traffic():
            with Client(EMBED, server.grpc_url, model="ernie_embed") as client:
                while not done.is_set():
                    client.infer(QUERIES[:2])

        caller = threading.Thread(target=traffic, daemon=True)
        caller.start()
        try:
            rollout = [
                *cli, "rollout", "--model", "ernie_embed", "--repository", str(repository),
                "--grpc-url", server.grpc_url, "--to", "2", "--shadow", "--fraction", "1", "--requests", "10",
                "--duration", "60", "--metrics-url", server.metrics_url,
            ]  # fmt: skip
            run = subprocess.run(rollout, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
        finally:
            done.set()
            caller.join(timeout=30)
        assert run.returncode == 0, run.stdout + run.stderr
        assert "agreement 1.0000" in run.stdout and "now serving version 2 (was 1)" in run.stdout
        with Client(EMBED, server.grpc_url, model="ernie_embed") as client:
            assert np.stack(decode_outputs(EMBED, client.infer(QUERIES[:1]))).shape == (1, 48)
