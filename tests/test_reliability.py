"""Reliability against the real server: bad requests, a soak with bad requests mixed in, and killed processes.

Every case ends with the same check: the server is still up and answers a good request as it did before.
docs/RELIABILITY.md lists these cases and their results.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from ernie_deploy.client.grpc_client import Client, Retry, TextError
from ernie_deploy.core.errors import BadRequest, ErnieDeployError
from ernie_deploy.core.tasks import DEMO_MODELS, SEQ_CLS, TOKEN_CLS
from ernie_deploy.repository.served import served_models
from ernie_deploy.serving.limits import WINDOWS

pytestmark = pytest.mark.integration

GOOD = "新华社北京电国足公布世预赛名单"
TASKS = [SEQ_CLS, TOKEN_CLS]


def _bytes(*texts) -> np.ndarray:
    return np.array([t.encode("utf-8") if isinstance(t, str) else t for t in texts], dtype=np.object_).reshape(-1, 1)


def probe_cli(*args: str) -> subprocess.CompletedProcess:
    """`ernie-deploy probe`, run the way a container's liveness check runs it: a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "ernie_deploy.cli", "probe", *args], capture_output=True, text=True, timeout=60
    )


def _raw(url: str, model: str, array: np.ndarray, dtype: str = "BYTES", name: str = "text", version: str = ""):
    """One request with tritonclient itself, for what our Client would never send."""
    client = grpcclient.InferenceServerClient(url)
    try:
        tensor = grpcclient.InferInput(name, list(array.shape), dtype)
        tensor.set_data_from_numpy(array)
        return client.infer(model, [tensor], model_version=version)
    finally:
        client.close()


@pytest.fixture(scope="module")
def reference(server):
    """What the server answers for GOOD before any bad request, per task."""
    out = {}
    for task in TASKS:
        with Client(task, server.grpc_url) as client:
            out[task.name] = client.predict([GOOD], progress=False)
    return out


@pytest.fixture(autouse=True)
def still_serving(request):
    """Around every test here that uses the shared server: afterwards it still runs, no stub had to be
    brought back, and GOOD gets the answer it got before."""
    if "server" not in request.fixturenames:
        yield
        return
    server, reference = request.getfixturevalue("server"), request.getfixturevalue("reference")
    yield
    assert server.is_running(), server.log_text()[-3000:]
    assert server.watchdog is None or server.watchdog.restarts == []
    for task in TASKS:
        with Client(task, server.grpc_url) as client:
            assert client.predict([GOOD], progress=False) == reference[task.name]


# -- bad requests: refused with INVALID_ARGUMENT and our message ----------------------------------------------

REFUSED_TEXTS = {
    "empty": ([""], "text 0 is empty"),
    "whitespace only": ([" \t\n　"], "text 0 is empty"),
    "invalid UTF-8": ([b"\xe4\xb8"], "text 0 is not valid UTF-8"),
    "only NUL and control characters": (["\x00\x01\u200b"], "text 0 has only control or format characters"),
    "good and bad mixed": ([GOOD, "", "国足", b"\xff"], "text 1 is empty; text 3 is not valid UTF-8"),
}


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
@pytest.mark.parametrize("case", list(REFUSED_TEXTS))
def test_bad_texts_are_refused_with_a_message_naming_them(server, task, case):
    texts, message = REFUSED_TEXTS[case]
    with pytest.raises(InferenceServerException) as caught:
        _raw(server.grpc_url, DEMO_MODELS[task.name], _bytes(*texts))
    assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert message in caught.value.message()
    assert "fix:" in caught.value.message()
    with Client(task, server.grpc_url) as client:  # the library's view: BadRequest, never retried
        with pytest.raises(BadRequest, match=message.split(";")[0]):
            client.infer(texts)
        assert client.retries == 0


TRITON_REFUSALS = {  # checked by Triton before any of our code runs
    "INT32 instead of BYTES": (
        lambda: np.array([[1]], dtype=np.int32),
        "INT32",
        "text",
        "INVALID_ARGUMENT",
        "data-type is 'INT32', but model",
    ),
    "no batch axis": (
        lambda: np.array([GOOD.encode()], dtype=np.object_),
        "BYTES",
        "text",
        "INVALID_ARGUMENT",
        "unexpected shape for input 'text'",
    ),
    "three axes": (
        lambda: np.array([[[GOOD.encode()]]], dtype=np.object_),
        "BYTES",
        "text",
        "INVALID_ARGUMENT",
        "unexpected shape for input 'text'",
    ),
    "batch over max_batch_size": (
        lambda: _bytes(*[GOOD] * 65),
        "BYTES",
        "text",
        "INVALID_ARGUMENT",
        "batch-size must be <= 64",
    ),
    "missing input (wrong name)": (
        lambda: _bytes(GOOD),
        "BYTES",
        "sentence",
        "INVALID_ARGUMENT",
        "unexpected inference input 'sentence'",
    ),
}


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
@pytest.mark.parametrize("case", list(TRITON_REFUSALS))
def test_malformed_tensors_are_refused_by_triton(server, task, case):
    make, dtype, name, status, message = TRITON_REFUSALS[case]
    with pytest.raises(InferenceServerException) as caught:
        _raw(server.grpc_url, DEMO_MODELS[task.name], make(), dtype=dtype, name=name)
    assert caught.value.status() == f"StatusCode.{status}"
    assert message in caught.value.message()


@pytest.mark.parametrize(
    "model, version, message",
    [
        ("ernie_nonexistent", "", "unknown model: 'ernie_nonexistent'"),
        ("ernie_seqcls", "7", "'ernie_seqcls' version 7 is not found"),
    ],
)
def test_unknown_model_or_version_is_not_found(server, model, version, message):
    with pytest.raises(InferenceServerException) as caught:
        _raw(server.grpc_url, model, _bytes(GOOD), version=version)
    assert caught.value.status() == "StatusCode.NOT_FOUND"
    assert message in caught.value.message()


# -- unusual but valid texts: answered, with offsets into the text as sent --------------------------------------

ODD_TEXTS = {
    "embedded NUL": "北京\x00上海和广州",
    "emoji and rare CJK": "😀🎉 𠀀𪚥 北京欢迎你，上海也欢迎你",
    "zero-width and combining marks": "北\u200b京e\u0301上海",
    "full-width and Latin": "ＮＢＡ总决赛在洛杉矶举行 Lakers win",
}


@pytest.mark.parametrize("case", list(ODD_TEXTS))
def test_unusual_texts_are_answered_with_offsets_into_the_text(server, case):
    text = ODD_TEXTS[case]
    with Client(SEQ_CLS, server.grpc_url) as client:
        out = client.infer([text])
        assert out["label"][0, 0].decode() in served_models(server.model_repository)[DEMO_MODELS[SEQ_CLS.name]].labels
        assert 0 < out["confidence"][0, 0] <= 1
    with Client(TOKEN_CLS, server.grpc_url) as client:
        entities = client.predict([text], progress=False)[0]
    for e in entities:
        assert text[e["start"] : e["end"]] == e["text"], (text, e)


def test_over_long_text_is_truncated_and_the_response_says_so(server):
    text = ("国足公布世预赛名单北京队" * 900)[:10_000]
    with Client(SEQ_CLS, server.grpc_url) as client:
        out = client.infer([text, GOOD])
        assert out["label"].shape == (2, 1) and out["truncated"][:, 0].tolist() == [True, False]
    # NER reads the whole text in windows (the default): nothing is cut, entities come from all of it; a text as long
    # as its limit allows (serving.limits.WINDOWS: a character costs it ~50x what it costs the classifier).
    text = text[: WINDOWS.max_text_chars]
    with Client(TOKEN_CLS, server.grpc_url) as client:
        out = client.infer([text, GOOD])
        assert out["truncated"][:, 0].tolist() == [False, False]
        entities = json.loads(out["entities"][0, 0])
    assert all(text[e["start"] : e["end"]] == e["text"] for e in entities)
    assert max(e["end"] for e in entities) > 0.9 * len(text), "entities near the end of the text are found"


# -- a batch mixing good and bad texts: nothing lost, nothing reordered ------------------------------------------


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
def test_keep_going_returns_good_texts_in_place_and_names_bad_ones(server, task):
    texts = ["国足公布世预赛名单", "", "股市大涨", b"\xff", "北京欢迎你", "\x00"]
    with Client(task, server.grpc_url) as client:
        with pytest.raises(BadRequest):  # the default: a bad text fails its request, loudly
            client.predict(texts, progress=False)
        got = client.predict(texts, batch_size=2, progress=False, keep_going=True)
        alone = [client.predict([t], progress=False)[0] for t in texts[::2]]
    assert [type(g) is TextError for g in got] == [False, True, False, True, False, True]
    assert [str(g) for g in got[1::2]] == [
        "text 1 is empty",
        "text 3 is not valid UTF-8 (invalid start byte at byte 0)",
        "text 5 has only control or format characters, which the tokenizer drops",
    ]
    assert got[0::2] == alone


def test_concurrent_requests_sharing_a_batch_fail_alone(server, seq_cls_pipeline):
    """Good and bad requests at the same time land in the same dynamic batch; each good one is answered
    as if it were alone."""
    from concurrent.futures import ThreadPoolExecutor

    texts = ["国足公布世预赛名单", "股市大涨", "北京欢迎你", "新闻联播"] * 8
    with Client(SEQ_CLS, server.grpc_url) as client:
        expected = client.predict(texts, batch_size=1, progress=False)

    def one(i):
        with Client(SEQ_CLS, server.grpc_url) as client:
            if i % 3 == 2:
                with pytest.raises(BadRequest, match="text 0 is empty"):
                    client.infer([""])
                return None
            return client.predict([texts[i]], progress=False)[0]

    with ThreadPoolExecutor(12) as pool:
        got = list(pool.map(one, range(len(texts))))
    assert [g for i, g in enumerate(got) if i % 3 != 2] == [e for i, e in enumerate(expected) if i % 3 != 2]


# -- soak: CI-sized here; `ernie-deploy soak` runs the full 20,000 ------------------------------------------------


def _cases(seq_cls_pipeline, token_cls_pipeline, n=300):
    from ernie_deploy.evaluate.offline import served_predictions
    from ernie_deploy.fetch.data import read_split
    from ernie_deploy.reliability.soak import SoakCase

    cases = []
    for p in (seq_cls_pipeline, token_cls_pipeline):
        texts = read_split(p.data, "test", p.task.split_format)[0][:n]
        # read as the `repository` fixture serves them: as each model's record says (NER in its training windows)
        expected = served_predictions(p.static.spec, p.onnx, p.static.vocab_file, texts)
        cases.append(SoakCase(p.static.spec, texts, expected))
    return cases


def test_soak_mixed_good_and_bad_requests(server, seq_cls_pipeline, token_cls_pipeline):
    from ernie_deploy.reliability.soak import soak

    report = soak(
        server.grpc_url,
        _cases(seq_cls_pipeline, token_cls_pipeline),
        requests=1500,
        concurrency=16,
        bad_fraction=0.15,
        server=server,
        progress=False,
    )
    print(json.dumps(report.to_dict()))
    assert report.bad_requests > 100 and report.good_requests > 1000
    assert report.refused == report.bad_requests, report.examples
    assert report.answered == report.good_requests, report.examples
    assert (report.unexpected_errors, report.mismatches, report.lost, report.server_restarts) == (0, 0, 0, 0)
    assert report.client_retries == 0 and report.stub_restarts == 0


# -- faults: killed stubs and a killed server ----------------------------------------------------------------


@pytest.fixture(scope="module")
def fault_server(repository, tmp_path_factory):
    """A server of its own, since these tests kill its processes."""
    from ernie_deploy.server.process import TritonServer

    log = tmp_path_factory.mktemp("faults") / "server.log"
    with TritonServer(repository, http_port=0, grpc_port=0, metrics_port=0, log_file=log) as srv:
        yield srv


def test_killed_stubs_are_reloaded_and_no_request_is_lost(fault_server, seq_cls_pipeline, token_cls_pipeline):
    """SIGKILL one python stub after another under load (soak chaos): the watchdog reloads each model,
    the client retries, and every answer still equals the offline one."""
    from ernie_deploy.reliability.soak import soak
    from ernie_deploy.server.watchdog import stub_processes

    stubs_before = sorted(stub_processes(fault_server.pid).values())
    report = soak(
        fault_server.grpc_url,
        _cases(seq_cls_pipeline, token_cls_pipeline, 100),
        requests=1500,
        concurrency=8,
        bad_fraction=0.1,
        server=fault_server,
        chaos_s=1.0,
        chaos_kills=4,
        progress=False,
    )
    print(json.dumps(report.to_dict()))
    assert report.stubs_killed == 4, report  # requests must outlast the kills for the test to mean anything
    assert report.stub_restarts == 4
    assert all(r.ok for r in fault_server.watchdog.restarts), fault_server.watchdog.restarts
    assert report.client_retries > 0
    assert report.clean and report.answered == report.good_requests, report.examples
    deadline = time.monotonic() + 10
    while sorted(stub_processes(fault_server.pid).values()) != stubs_before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert sorted(stub_processes(fault_server.pid).values()) == stubs_before


def test_without_the_watchdog_a_dead_stub_stays_dead_and_the_client_says_so(ensemble_repository, tmp_path):
    """What Triton does on its own (2.51): the model fails every request, health still says ready."""
    import urllib.request

    from ernie_deploy.server.probe import probe
    from ernie_deploy.server.process import TritonServer
    from ernie_deploy.server.watchdog import stub_processes

    with TritonServer(
        ensemble_repository,
        http_port=0,
        grpc_port=0,
        metrics_port=0,
        restart_stubs=False,
        log_file=tmp_path / "server.log",
    ) as srv:
        assert all(r.ok for r in probe(srv.http_url))
        # A model the probe cannot feed one text to is a failure that says why, not a crash.
        (step,) = probe(srv.http_url, models=["ernie_seqcls_model"])
        assert not step.ok and "not the text inputs a probe can send" in step.message
        tokenizer = [pid for pid, model in stub_processes(srv.pid).items() if model == "ernie_tokenizer"]
        os.kill(tokenizer[0], signal.SIGKILL)
        time.sleep(0.5)
        with Client(SEQ_CLS, srv.grpc_url, retry=Retry(attempts=3, base_s=0.05)) as client:
            with pytest.raises(
                ErnieDeployError,
                match=r"failed after 3 attempts .*Stub process "
                r"'ernie_tokenizer_0_0' is not healthy",
            ):
                client.infer([GOOD])
        with urllib.request.urlopen(f"{srv.http_url}/v2/health/ready") as response:
            assert response.status == 200
        # What health cannot see, the probe does: both ensembles share the dead tokenizer, and the CLI
        # (a container's liveness command) exits non-zero naming them.
        results = probe(srv.http_url)
        assert [r.model for r in results] == ["ernie_seqcls", "ernie_tokencls"]
        assert not any(r.ok for r in results)
        assert all("ernie_tokenizer_0_0' is not healthy" in r.message for r in results), results
        cli = probe_cli("--http-url", srv.http_url)
        assert cli.returncode != 0
        assert "FAIL ernie_seqcls" in cli.stdout and "FAIL ernie_tokencls" in cli.stdout
        assert "did not answer a text" in cli.stderr and "Traceback" not in cli.stderr


def test_killed_server_restarted_on_the_same_ports_answers_the_waiting_client(fault_server, tmp_path):
    """SIGKILL the whole server while a client is retrying; a new server on the same ports answers it, and
    answers what the old one answered."""
    from ernie_deploy.server.process import TritonServer

    texts = ["国足公布世预赛名单", "股市大涨", "北京欢迎你"]
    with Client(SEQ_CLS, fault_server.grpc_url) as client:
        before = client.predict(texts, progress=False)
    ports = dict(fault_server.ports)
    os.kill(fault_server.pid, signal.SIGKILL)
    fault_server.stop()  # reaps it, kills its orphaned stubs, sweeps its shared memory
    got, errors = [], []

    def waiting_client():
        try:
            with Client(
                SEQ_CLS, fault_server.grpc_url, retry=Retry(attempts=60, base_s=0.1, max_s=0.5, budget_s=90)
            ) as client:
                got.append(client.predict(texts, progress=False))
                got.append(client.retries)
        except Exception as exc:
            errors.append(exc)

    thread = threading.Thread(target=waiting_client)
    thread.start()
    time.sleep(1.0)
    assert thread.is_alive() and not errors  # still retrying: no server yet
    with TritonServer(
        fault_server.model_repository,
        http_port=ports["http"],
        grpc_port=ports["grpc"],
        metrics_port=ports["metrics"],
        log_file=tmp_path / "restarted.log",
    ):
        thread.join(timeout=120)
        assert not errors, errors
        assert got[0] == before and got[1] > 0


def test_probe_passes_on_a_healthy_server_and_fails_clearly_without_one(server):
    from ernie_deploy.server.preflight import free_ports
    from ernie_deploy.server.probe import probe

    results = probe(server.http_url)
    assert [r.model for r in results] == ["ernie_seqcls", "ernie_tokencls"] and all(r.ok for r in results)
    cli = probe_cli("--http-url", server.http_url, "--model", "ernie_seqcls")
    assert cli.returncode == 0 and cli.stdout.startswith("ok ernie_seqcls"), cli.stdout + cli.stderr
    url = f"http://127.0.0.1:{free_ports(1)[0]}"
    cli = probe_cli("--http-url", url, "--timeout", "2")
    assert cli.returncode != 0 and f"cannot probe {url}: no answer" in cli.stderr
    assert "Traceback" not in cli.stderr


def test_client_gives_up_on_a_dead_server_with_a_clear_error():
    from ernie_deploy.server.preflight import free_ports

    url = f"127.0.0.1:{free_ports(1)[0]}"
    with Client(SEQ_CLS, url, retry=Retry(attempts=3, base_s=0.01)) as client:
        t0 = time.monotonic()
        with pytest.raises(ErnieDeployError, match=rf"at {url} failed after 3 attempts .*UNAVAILABLE"):
            client.infer([GOOD])
        assert time.monotonic() - t0 < 10
