"""`ernie-deploy stats` on a real tritonserver: counts that match the traffic sent, per served model and step, for
what the server serves (asked from the server, whatever folder the tool runs in), warm-up kept apart."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time

import pytest

from ernie_deploy.client.grpc_client import Client
from ernie_deploy.core.admin_key import ADMIN_KEY_ENV, ADMIN_KEY_FILE_ENV
from ernie_deploy.core.tasks import DEMO_MODELS, SEQ_CLS
from ernie_deploy.repository.served import served_steps
from ernie_deploy.server.stats import format_table, served_times, snapshot
from tests.conftest import artifacts, serve_bytes

pytestmark = pytest.mark.integration

KEY = "stats-admin-key-0123456789"
STEPS = {
    "ernie_seqcls": ["ernie_tokenizer", "ernie_seqcls_model", "ernie_seqcls_postprocess"],
    "fused": ["fused"],
    "news": ["ernie_tokenizer", "news_model", "news_postprocess"],
}


@pytest.fixture(scope="module")
def tiny_server(tmp_path_factory, tiny_pipeline):
    """The tiny classifier three times in one repository, served behind an admin key: as the ensembles
    `ernie_seqcls` and `news` (which share their tokenizer), and fused under the name `fused`. Only the warm-up test
    sends traffic to `news`."""
    from ernie_deploy.repository.build import build
    from ernie_deploy.repository.options import BuildOptions
    from ernie_deploy.server.process import TritonServer

    p = tiny_pipeline
    repo = tmp_path_factory.mktemp("stats_models")
    for name in ("ernie_seqcls", "news"):
        build(
            artifacts(p, name),
            repo,
            BuildOptions(runtime="python", layout="ensemble"),
        )
    build(
        artifacts(p, "fused"),
        repo,
        BuildOptions(runtime="python", layout="fused"),
    )
    log = repo.parent / "stats.log"
    with TritonServer(repo, http_port=0, grpc_port=0, metrics_port=0, log_file=log, admin_key=KEY) as server:
        yield server, repo


@pytest.fixture
def no_key(monkeypatch):
    monkeypatch.delenv(ADMIN_KEY_ENV, raising=False)
    monkeypatch.delenv(ADMIN_KEY_FILE_ENV, raising=False)


@pytest.fixture
def key_file(tmp_path, no_key):
    path = tmp_path / "admin-key"
    path.write_text(KEY + "\n")
    return str(path)


def _stats(capsys, server, *argv: str) -> tuple[int, str, str]:
    from ernie_deploy.cli import main

    code = main(["stats", "--http-url", server.http_url, *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _settle(server, model: str, requests: int, before=None) -> None:
    """Wait until `model` has counted `requests` successful requests (since `before`): Triton records a request in
    its statistics a moment after the client has its answer."""
    from ernie_deploy.server.stats import ModelTimes

    deadline = time.monotonic() + 10
    while (snapshot(server.http_url)[model] - (before or {}).get(model, ModelTimes())).requests < requests:
        assert time.monotonic() < deadline, f"{model} never counted {requests} requests"
        time.sleep(0.05)


def _row(table: str, name: str) -> list[str]:
    """The first row of `table` for step `name`, split on whitespace."""
    return next(line.split() for line in table.splitlines() if line.split()[:1] == [name])


def test_counts_are_the_traffic_between_two_snapshots(tiny_server):
    server, repo = tiny_server
    steps = served_steps(repo)
    assert steps == STEPS
    before = snapshot(server.http_url)
    with Client(SEQ_CLS, server.grpc_url) as client:
        for _ in range(5):
            client.infer(["国足公布世预赛名单", "股市大涨"])
    with Client(SEQ_CLS, server.grpc_url, model="fused") as client:
        client.infer(["国足"])
    _settle(server, "ernie_seqcls", 5, before)
    _settle(server, "fused", 1, before)
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
    assert "ernie_seqcls_postprocess" in table and "fused: 1 request (0 failed)" in table
    assert "warm-up" not in table  # a window between two snapshots holds no warm-up, and says nothing of it


def test_cli_prints_and_writes_the_table(tiny_server, tmp_path, capsys, no_key):
    server, repo = tiny_server
    out = tmp_path / "stats.json"
    argv = ["--repository", str(repo), "--metrics-url", server.metrics_url, "--model", "ernie_seqcls"]
    code, printed, _ = _stats(capsys, server, *argv, "--interval", "0.2", "--json", str(out))
    assert code == 0
    # --model shows that model alone, its answers too
    assert printed.startswith("ernie_seqcls: 0 requests") and "fused" not in printed
    # (the texts an earlier test sent may land in the interval: a step pushes its counts once a second)
    assert "answers over the interval" in printed and "ernie_seqcls v1: " in printed and "news v" not in printed
    assert json.loads(out.read_text())["ernie_seqcls"]["steps"]["ernie_tokenizer"]["requests"] == 0
    code, _, err = _stats(capsys, server, *argv[:-1], "nope")
    assert code == 2 and "nope: not a model" in err and "use one of: ernie_seqcls, fused, news" in err
    code, _, err = _stats(capsys, server, "--repository", str(tmp_path / "none"))
    assert code == 2 and "no model repository" in err


def test_with_the_key_the_server_says_what_it_serves_whatever_the_folder(
    tiny_server, tmp_path, capsys, monkeypatch, key_file
):
    """Run where no models/ folder is: the server's index and configs group each step under its ensembles, and the
    tokenizer both ensembles run names them both, in the table and in the JSON."""
    server, _ = tiny_server
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "stats.json"
    code, printed, _ = _stats(capsys, server, "--admin-key-file", key_file, "--json", str(out))
    assert code == 0, printed
    assert "no served model" not in printed and "not known" not in printed and "other loaded" not in printed
    numbers = json.loads(out.read_text())
    assert sorted(numbers) == sorted(STEPS)
    assert {name: list(entry["steps"]) for name, entry in numbers.items()} == STEPS
    for name in ("ernie_seqcls", "news"):
        assert numbers[name]["steps"]["ernie_tokenizer"]["shared_by"] == ["ernie_seqcls", "news"]
        assert numbers[name]["steps"][f"{name}_model"]["shared_by"] == []
    blocks = {block.split(":", 1)[0]: block for block in printed.split("\n\n")}
    for name in ("ernie_seqcls", "news"):
        tokenizer = next(line for line in blocks[name].splitlines() if line.split()[:1] == ["ernie_tokenizer"])
        assert tokenizer.endswith("shared by ernie_seqcls, news: totals for both"), tokenizer
        assert "shared" not in _row(blocks[name], f"{name}_model")
    # The key from the environment does the same; a key the server was not started with is refused by name.
    monkeypatch.setenv(ADMIN_KEY_ENV, KEY)
    assert _stats(capsys, server) == (0, printed, "")
    monkeypatch.setenv(ADMIN_KEY_ENV, "another-key-0123456789")
    code, _, err = _stats(capsys, server)
    assert code == 2 and f"refused the admin key from the environment variable {ADMIN_KEY_ENV}" in err
    assert "Traceback" not in err
    code, _, err = _stats(capsys, server, "--admin-key-file", key_file, "--model", "nope")
    assert code == 2 and "nope: not a model" in err and "use one of: ernie_seqcls, fused, news" in err


def test_without_the_key_each_loaded_model_shows_and_a_matching_repository_groups_them(
    tiny_server, tmp_path, capsys, monkeypatch, no_key
):
    server, repo = tiny_server
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "stats.json"
    code, printed, _ = _stats(capsys, server, "--json", str(out))
    assert code == 0, printed
    numbers = json.loads(out.read_text())
    assert {name for name, entry in numbers.items() if entry["served"]} == set(STEPS)
    assert numbers["ernie_seqcls"]["steps"] is None and numbers["news"]["steps"] is None
    assert list(numbers["fused"]["steps"]) == ["fused"]  # a fused model is its own one step, config or not
    assert {name for name, entry in numbers.items() if not entry["served"]} == {
        "ernie_tokenizer",
        "ernie_seqcls_model",
        "ernie_seqcls_postprocess",
        "news_model",
        "news_postprocess",
    }
    assert "steps: not known" in printed and "other loaded models, each on its own:" in printed
    assert "the steps of ernie_seqcls, news are not known" in printed and ADMIN_KEY_ENV in printed

    # A repository that records news with another model step is not what the server serves: only ernie_seqcls,
    # which it records as served, takes its steps from it.
    other = tmp_path / "other"
    for config in repo.glob("*/config.pbtxt"):
        (other / config.parent.name).mkdir(parents=True)
        shutil.copy(config, other / config.parent.name / "config.pbtxt")
    news = other / "news" / "config.pbtxt"
    news.write_text(news.read_text().replace('"news_model"', '"news_model_v0"'))
    code, printed, _ = _stats(capsys, server, "--repository", str(other), "--json", str(out))
    numbers = json.loads(out.read_text())
    assert code == 0 and numbers["news"]["steps"] is None
    assert list(numbers["ernie_seqcls"]["steps"]) == STEPS["ernie_seqcls"]
    assert f"the steps of ernie_seqcls are those the repository {other} records" in printed

    # The repository the server serves, as models/ where the tool runs: every ensemble grouped, shared step marked.
    shutil.copytree(repo, tmp_path / "models")
    code, printed, _ = _stats(capsys, server, "--json", str(out))
    numbers = json.loads(out.read_text())
    assert code == 0 and {name: list(entry["steps"]) for name, entry in numbers.items()} == STEPS
    assert numbers["news"]["steps"]["ernie_tokenizer"]["shared_by"] == ["ernie_seqcls", "news"]
    assert "shared by ernie_seqcls, news: totals for both" in printed and "other loaded" not in printed


def test_since_load_counts_the_warmup_and_an_interval_leaves_it_out(
    tiny_server, tmp_path, capsys, monkeypatch, key_file
):
    """After exactly one request to `news`, its steps have answered that request and their warm-up: the rows say
    how many were warm-up (or, without the configs, that it is included); over an interval they hold the traffic
    alone, and the steps' times add up to the request's end to end."""
    server, _ = tiny_server
    out = tmp_path / "stats.json"
    with Client(SEQ_CLS, server.grpc_url, model="news") as client:
        client.infer(["国足公布世预赛名单"])
    _settle(server, "news", 1)
    code, printed, _ = _stats(capsys, server, "--admin-key-file", key_file, "--model", "news", "--json", str(out))
    assert code == 0, printed
    numbers = json.loads(out.read_text())["news"]
    assert numbers["since_load"] and (numbers["requests"], numbers["warmup_requests"]) == (1, 0)
    for step in ("news_model", "news_postprocess"):
        # one instance, one warm-up sample of batch 1 (the build's): one warm-up request beside the real one
        assert (numbers["steps"][step]["requests"], numbers["steps"][step]["warmup_requests"]) == (2, 1), step
        assert _row(printed, step)[:4] == [step, "2", "1", "0"]
    assert numbers["steps"]["ernie_tokenizer"]["warmup_requests"] == 1
    assert printed.splitlines()[1].split()[:4] == ["step", "requests", "warm-up", "failed"]
    assert "since load: the requests, texts and times of each step" in printed and "--interval" in printed

    # Without the configs the count is not known, and the output says the warm-up is in the numbers.
    monkeypatch.chdir(tmp_path)
    code, printed, _ = _stats(capsys, server)
    assert code == 0 and _row(printed, "news_model")[:3] == ["news_model", "2", "?"]
    assert "fused: " in printed and "warm-up included" in printed and "warm-up ?: not known" in printed

    # Over an interval, only the request sent in it.
    result = {}

    def run_stats():
        result["out"] = _stats(capsys, server, "--admin-key-file", key_file, "--model", "news", "--interval", "6")

    watcher = threading.Thread(target=run_stats)
    watcher.start()
    time.sleep(2)  # the first snapshot is taken at once; the request lands well inside the window
    with Client(SEQ_CLS, server.grpc_url, model="news") as client:
        client.infer(["国足公布世预赛名单"])
    watcher.join(timeout=60)
    code, printed, _ = result["out"]
    assert code == 0, printed
    assert printed.startswith("news: 1 request (0 failed)") and "warm-up" not in printed
    assert "shared by ernie_seqcls, news: totals for both" in printed
    for step in ("ernie_tokenizer", "news_model", "news_postprocess"):
        assert _row(printed, step)[:3] == [step, "1", "0"], step


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
    name = DEMO_MODELS[SEQ_CLS.name]
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        with pytest.raises(InferenceServerException, match="empty"):
            client.infer(name, [text])
    after = snapshot(server.http_url)
    assert (after[name] - before[name]).failed == ENSEMBLE_FAIL_COUNTS  # Triton's own count
    rows = {r.model: r for r in served_times(steps, after, before)}
    ensemble = rows["ernie_seqcls"]
    assert (ensemble.times.requests, ensemble.times.failed) == (0, 1)
    assert all(step.failed == 0 for _, step in ensemble.steps)
    table = format_table([ensemble])
    assert "ernie_seqcls: 0 requests (1 failed)" in table
    head, tokenizer = table.splitlines()[1:3]
    # The tokenizer step answered it with an error, which Triton counts as a request it served, not a failure.
    assert head.split()[1:3] == ["requests", "failed"] and tokenizer.split()[:3] == ["ernie_tokenizer", "1", "0"]


@pytest.mark.parametrize("answer, problem", [(b"<html>hello</html>", "other than JSON"), (None, "more than 16 MiB")])
def test_a_url_that_is_not_tritons_api_is_refused_by_name(answer, problem, capsys):
    """Another service on the port: an HTML page, or an endless answer, read up to a bound."""
    from ernie_deploy.cli import main
    from ernie_deploy.server.probe import MAX_ANSWER_BYTES

    body = answer if answer is not None else b"[" * (MAX_ANSWER_BYTES + 2)
    httpd = serve_bytes(body)
    try:
        assert main(["stats", "--http-url", f"http://127.0.0.1:{httpd.server_port}"]) == 2
    finally:
        httpd.shutdown()
    err = capsys.readouterr().err
    assert problem in err and "not Triton's HTTP API" in err and "Traceback" not in err


def test_stats_shows_what_each_model_answered_beside_its_reference(repository, tmp_path, capsys, no_key):
    """The demo models on a real server, the classifier's answering step given a reference profile (reference.json
    beside its labels.json, the file `build` writes): texts sent show in `stats` as counts per bucket, live shares
    beside the reference's and a drift per series; the token model, with no reference, says how to make one; a
    metrics URL where nothing listens is said, with the times table still shown."""
    from ernie_deploy.client.answers import NO_REFERENCE, js_divergence, scrape
    from ernie_deploy.core.profile import CHAR_BUCKETS, CONFIDENCE_BUCKETS, READINGS, chars_bucket
    from ernie_deploy.core.tasks import TOKEN_CLS
    from ernie_deploy.server.process import TritonServer

    seq, tok = DEMO_MODELS[SEQ_CLS.name], DEMO_MODELS[TOKEN_CLS.name]
    repo = tmp_path / "models"
    shutil.copytree(repository, repo, copy_function=os.link)  # the server's files, its folders of our own
    for labels_file in repo.glob(f"{seq}*/*/labels.json"):
        reference = labels_file.parent / "reference.json"
        reference.unlink(missing_ok=True)  # a copy to write, not the shared file
        labels = json.loads(labels_file.read_text(encoding="utf-8"))
        shares = {
            "label": {label: (1.0 if i == 0 else 0.0) for i, label in enumerate(labels)},
            "confidence": {b: (1.0 if b == "0.95-1" else 0.0) for b in CONFIDENCE_BUCKETS},
            "chars": {b: (1.0 if b == "1-16" else 0.0) for b in CHAR_BUCKETS},
            "reading": {b: (1.0 if b == "whole" else 0.0) for b in READINGS},
        }
        reference.write_text(json.dumps({"source": "test", "texts": 10, "shares": shares}), encoding="utf-8")
    for reference in repo.glob(f"{tok}*/*/reference.json"):
        reference.unlink()  # the token model serves without one, whatever the build made
    texts = ["国足公布世预赛名单", "股市大涨", "央行宣布下调存款准备金率", "新款手机发布会今日举行"]
    with TritonServer(repo, http_port=0, grpc_port=0, metrics_port=0, log_file=tmp_path / "server.log") as server:
        url = server.metrics_url
        before = {v.version: v.texts for v in scrape(url).of(seq)}  # a model's warm-up may count: read what was
        with Client(SEQ_CLS, server.grpc_url) as client:
            for _ in range(3):
                client.infer(texts)
        deadline = time.monotonic() + 15  # the step pushes its counts once a second
        while sum(v.texts - before.get(v.version, 0) for v in scrape(url).of(seq)) < 3 * len(texts):
            assert time.monotonic() < deadline, f"{seq}'s answers never showed on {url}"
            time.sleep(0.2)
        while not scrape(url).of(tok):  # the token model's series, declared at its load, pushed by its own step
            assert time.monotonic() < deadline, f"{tok}'s series never showed on {url}"
            time.sleep(0.2)
        out = tmp_path / "stats.json"
        argv = ["--repository", str(repo), "--metrics-url", url, "--json", str(out)]
        code, printed, err = _stats(capsys, server, *argv)
        assert code == 0, err
        (answers,) = scrape(url).of(seq)
        version = answers.version
        sent = int(answers.texts)
        assert f"{seq} v{version}: {sent} texts" in printed and sent >= 3 * len(texts)
        block = printed.split(f"{seq} v{version}:", 1)[1].split("\n\n", 1)[0]
        assert NO_REFERENCE not in block
        assert f"label {answers.drift('label'):.3f}" in block and "  label (drift " in block
        # Every text is 1-16 characters, as in the reference: chars does not drift; the label may.
        lengths = {chars_bucket(len(t)) for t in texts}
        assert lengths == {"1-16"} and "chars 0.000" in block
        rows = {line.split()[0]: line.split()[1:] for line in block.splitlines() if line.startswith("    ")}
        assert rows["1-16"] == [str(sent), "100.0%", "100.0%"]
        assert rows["whole"] == [str(sent), "100.0%", "100.0%"]
        first = json.loads((next(repo.glob(f"{seq}*/{version}/labels.json"))).read_text(encoding="utf-8"))[0]
        assert rows[first][-1] == "100.0%"  # the reference's one label, beside its live share
        live = answers.live["label"]
        assert sum(live.values()) == sent and answers.drift("label") == pytest.approx(js_divergence(live, {first: 1.0}))
        # The token model answers nothing here and has no reference.
        assert f"{tok} v" in printed and NO_REFERENCE in printed.split(f"{tok} v", 1)[1]
        numbers = json.loads(out.read_text())
        mine = numbers[seq]["answers"]
        assert mine["monitoring"] is True and mine["metrics_url"] == url
        assert mine["versions"][version]["texts"] == sent
        assert mine["versions"][version]["series"]["chars"]["buckets"]["1-16"] == {
            "count": sent,
            "share": 1.0,
            "reference": 1.0,
        }
        assert numbers[tok]["answers"]["versions"]["1"]["reference"] is False

        # No metrics where it points: said after the times, which still show; exit 0.
        code, printed, _ = _stats(capsys, server, "--repository", str(repo), "--metrics-url", "127.0.0.1:9")
        assert code == 0 and printed.startswith(f"{seq}: ")
        assert "answers: not read: could not read the server's metrics at http://127.0.0.1:9" in printed

        # Another server's metrics (none of this server's models there) are not taken for this one's.
        body = b'# TYPE nv_inference_request_success counter\nnv_inference_request_success{model="x",version="1"} 1\n'
        other = serve_bytes(body)
        try:
            elsewhere = f"http://127.0.0.1:{other.server_port}/metrics"
            code, printed, _ = _stats(capsys, server, "--repository", str(repo), "--metrics-url", elsewhere)
        finally:
            other.shutdown()
            other.server_close()
        assert code == 0 and f"answers: not read: {elsewhere} holds the series of another server" in printed
