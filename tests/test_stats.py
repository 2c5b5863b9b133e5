"""`ernie-deploy stats` on a real tritonserver: counts that match the traffic sent, per served model and step."""

from __future__ import annotations

import json

import pytest

from ernie_deploy.client.grpc_client import Client
from ernie_deploy.core.tasks import SEQ_CLS
from ernie_deploy.repository.served import served_steps
from ernie_deploy.server.stats import format_table, served_times, snapshot

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def tiny_server(tmp_path_factory, tiny_pipeline):
    """The tiny classifier twice in one repository: as an ensemble, and fused under the name `fused`."""
    from ernie_deploy.repository.build import TaskArtifacts, build
    from ernie_deploy.repository.options import BuildOptions
    from ernie_deploy.server.process import TritonServer

    p = tiny_pipeline
    repo = tmp_path_factory.mktemp("stats_models")
    build(TaskArtifacts(SEQ_CLS, p.onnx, p.static.vocab_file, p.static.labels), repo)
    build(
        TaskArtifacts(SEQ_CLS.named("fused"), p.onnx, p.static.vocab_file, p.static.labels),
        repo,
        BuildOptions(layout="fused"),
    )
    with TritonServer(repo, http_port=0, grpc_port=0, metrics_port=0, log_file=repo.parent / "stats.log") as server:
        yield server, repo


def test_counts_are_the_traffic_between_two_snapshots(tiny_server):
    server, repo = tiny_server
    steps = served_steps(repo)
    assert steps == {
        "ernie_seqcls": ["ernie_tokenizer", "ernie_seqcls_model", "ernie_seqcls_postprocess"],
        "fused": ["fused"],
    }
    before = snapshot(server.http_url)
    with Client(SEQ_CLS, server.grpc_url) as client:
        for _ in range(5):
            client.infer(["国足公布世预赛名单", "股市大涨"])
    with Client(SEQ_CLS.named("fused"), server.grpc_url) as client:
        client.infer(["国足"])
    rows = {r.model: r for r in served_times(steps, snapshot(server.http_url), before)}
    ensemble = rows["ernie_seqcls"]
    assert (ensemble.times.requests, ensemble.times.texts, ensemble.times.failed) == (5, 10, 0)
    for name, step in ensemble.steps:
        assert (step.requests, step.texts) == (5, 10), name
        assert step.infer_ns > 0 and step.queue_ns >= 0 and step.executions <= 5
    # A request's end to end is its steps' times one after another (they overlap a little at the hand-offs).
    inside = sum(step.queue_ns + step.compute_ns for _, step in ensemble.steps)
    assert 0.7 * inside < ensemble.times.total_ns < 1.3 * inside
    fused = rows["fused"]
    assert fused.times.requests == 1 and fused.steps == [("fused", fused.times)]
    table = format_table(list(rows.values()))
    assert "ernie_seqcls: 5 requests (0 failed)" in table
    assert "ernie_seqcls_postprocess" in table and "fused: 1 requests" in table


def test_cli_prints_and_writes_the_table(tiny_server, tmp_path, capsys):
    from ernie_deploy.cli import main

    server, repo = tiny_server
    out = tmp_path / "stats.json"
    argv = ["stats", "--url", server.http_url, "--repository", str(repo), "--model", "ernie_seqcls"]
    assert main([*argv, "--interval", "0.2", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("ernie_seqcls: 0 requests") and "fused" not in printed
    assert json.loads(out.read_text())["ernie_seqcls"]["steps"]["ernie_tokenizer"]["requests"] == 0
    assert main([*argv[:-1], "nope"]) == 2
    assert "nope is not a served model" in capsys.readouterr().err
    assert main(["stats", "--url", server.http_url, "--repository", str(tmp_path / "none")]) == 2
    assert "no model repository" in capsys.readouterr().err


def test_a_failed_request_counts_once_for_the_ensemble_and_where_it_failed(tiny_server):
    """Triton 2.51 counts a failed ensemble request twice; `stats` shows it once, at the ensemble. A bad text (the
    tokenizer step answers it with INVALID_ARGUMENT) is no step's failure."""
    import numpy as np
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    from ernie_deploy.server.stats import ENSEMBLE_FAIL_COUNTS

    server, repo = tiny_server
    steps = served_steps(repo)
    before = snapshot(server.http_url)
    text = grpcclient.InferInput("text", [1, 1], "BYTES")
    text.set_data_from_numpy(np.array([[b""]], dtype=np.object_))
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        with pytest.raises(InferenceServerException, match="empty"):
            client.infer(SEQ_CLS.ensemble, [text])
    after = snapshot(server.http_url)
    assert (after[SEQ_CLS.ensemble] - before[SEQ_CLS.ensemble]).failed == ENSEMBLE_FAIL_COUNTS  # Triton's own count
    rows = {r.model: r for r in served_times(steps, after, before)}
    ensemble = rows["ernie_seqcls"]
    assert (ensemble.times.requests, ensemble.times.failed) == (0, 1)
    assert all(step.failed == 0 for _, step in ensemble.steps)
    table = format_table([ensemble])
    assert "ernie_seqcls: 0 requests (1 failed)" in table
    head, tokenizer = table.splitlines()[1:3]
    # The tokenizer step answered it with an error, which Triton counts as a request it served, not a failure.
    assert head.split()[1:3] == ["requests", "failed"] and tokenizer.split()[:3] == ["ernie_tokenizer", "1", "0"]
