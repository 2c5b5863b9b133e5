"""`ernie-deploy serve --gateway`: tritonserver and the HTTP gateway as two real processes from one command. The
gateway answers SimpleServing's JSON as the gRPC client answers, /ready is 200, it listens on loopback only, SIGTERM
stops the gateway and then Triton with nothing left of either; a gateway that dies takes Triton down with a message
naming it; over mutual gRPC TLS it reaches Triton with the CA and client certificate given; options that cannot work
are refused before anything starts."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from ernie_deploy.cli import main
from ernie_deploy.server.procs import group_members
from tests.conftest import NEWS_TEXTS, artifacts
from tests.test_serve import listening
from tests.test_tls import pki  # noqa: F401  (the fixture: a CA, a server certificate for 127.0.0.1, a client's)

MODEL = "news"
TEXTS = NEWS_TEXTS[:4]
FREE_PORTS = ["--http-port", "0", "--grpc-port", "0", "--metrics-port", "0", "--gateway-port", "0"]


@pytest.fixture(scope="module")
def repo(tmp_path_factory, tiny_pipeline) -> Path:
    from ernie_deploy.repository.build import build
    from ernie_deploy.repository.options import BuildOptions

    repo = tmp_path_factory.mktemp("serve_gateway") / "models"
    build(artifacts(tiny_pipeline, MODEL), repo, BuildOptions(runtime="python"))
    return repo


class Serve:
    """`ernie-deploy serve --gateway ...` as a subprocess, its output read as it comes."""

    def __init__(self, argv: list[str]):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ernie_deploy.cli", "serve", *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: [self._lines.put(line) for line in self.proc.stdout], daemon=True).start()
        self.output: list[str] = []

    @property
    def text(self) -> str:
        while not self._lines.empty():
            self.output.append(self._lines.get())
        return "".join(self.output)

    def until(self, mark: str, timeout: float = 180) -> str:
        deadline = time.monotonic() + timeout
        while mark not in self.text:
            if self.proc.poll() is not None and self._lines.empty():
                time.sleep(0.2)  # the reader's last lines
                if mark not in self.text:
                    pytest.fail(f"serve exited with {self.proc.returncode} before {mark!r}:\n{self.text}")
            try:
                self.output.append(self._lines.get(timeout=max(0.1, deadline - time.monotonic())))
            except queue.Empty:
                pytest.fail(f"no {mark!r} within {timeout} s:\n{self.text}")
        return self.text

    def wait(self, timeout: float = 60) -> int:
        code = self.proc.wait(timeout=timeout)
        time.sleep(0.2)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _ready_block(text: str) -> dict:
    """The pids and addresses the "Triton is ready" block prints."""
    return {
        "triton_pid": int(re.search(r"Triton is ready in .* \(pid (\d+),", text).group(1)),
        "grpc": re.search(r"grpc:\s+(\S+)", text).group(1),
        "gateway": re.search(r"gateway: (\S+) \(pid (\d+)", text).group(1),
        "gateway_pid": int(re.search(r"gateway: \S+ \(pid (\d+)", text).group(1)),
    }


def _open(url: str, body=None, context=None) -> tuple[int, object]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data, {"Content-Type": "application/json"} if data else {})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _grpc_labels(repo: Path, url: str, tls=None) -> list:
    from ernie_deploy.client.grpc_client import Client
    from ernie_deploy.repository.served import served_model

    record = served_model(repo, MODEL)
    with Client(record.task_spec, url, model=record, tls=tls) as client:
        return client.predict(TEXTS, progress=False)


def _simple_serving_labels(repo: Path, gateway: str) -> list:
    from ernie_deploy.repository.served import served_model

    status, answer = _open(f"{gateway}/models/{MODEL}", {"data": {"text": TEXTS}})
    assert status == 200, answer
    result = answer["result"]
    assert len(result["label"]) == len(result["confidence"]) == len(TEXTS)
    assert all(0 < p <= 1 for p in result["confidence"])
    labels = served_model(repo, MODEL).labels
    return [labels[i] for i in result["label"]]


@pytest.mark.integration
def test_serve_gateway_answers_and_sigterm_stops_both(repo):
    serve = Serve(["-r", str(repo), "--gateway", *FREE_PORTS])
    try:
        text = serve.until("Press Ctrl-C")
        found = _ready_block(text)
        gateway, gateway_pid, triton_pid = found["gateway"], found["gateway_pid"], found["triton_pid"]
        assert gateway.startswith("http://127.0.0.1:")
        status, ready = _open(f"{gateway}/ready")
        assert status == 200 and ready["ready"] is True and ready["models"] == {MODEL: True}, ready
        # Through the gateway, SimpleServing's JSON gives what the gRPC client gives from Triton itself.
        assert _simple_serving_labels(repo, gateway) == _grpc_labels(repo, found["grpc"])
        # The gateway follows the server's host rule: loopback by default.
        bound = listening(gateway_pid)
        assert bound and {addr for addr, _ in bound} <= {"127.0.0.1", "::ffff:127.0.0.1"}, bound
        assert group_members(gateway_pid) and group_members(triton_pid)
        serve.proc.send_signal(signal.SIGTERM)
        assert serve.wait() == 0, serve.text
    finally:
        serve.kill()
    text = serve.text
    # The gateway first (its requests in flight still reach Triton), then Triton.
    order = [text.index(mark) for mark in ("gateway stopped", "Stopping tritonserver", "tritonserver stopped")]
    assert order == sorted(order), text
    assert group_members(gateway_pid) == [] and group_members(triton_pid) == [], text


@pytest.mark.integration
def test_a_gateway_that_dies_stops_triton_with_a_message(repo):
    serve = Serve(["-r", str(repo), "--gateway", *FREE_PORTS])
    try:
        found = _ready_block(serve.until("Press Ctrl-C"))
        os.kill(found["gateway_pid"], signal.SIGKILL)
        assert serve.wait() == 2, serve.text
    finally:
        serve.kill()
    text = serve.text
    assert f"the gateway ({found['gateway']}) exited on its own with code -9" in text
    assert "tritonserver was stopped too" in text and "fix:" in text
    assert group_members(found["triton_pid"]) == [] and group_members(found["gateway_pid"]) == []


@pytest.mark.integration
def test_serve_gateway_over_mutual_grpc_tls(repo, pki):  # noqa: F811
    from ernie_deploy.core.tls import Tls

    server_tls = ["--grpc-tls-cert", str(pki / "server.crt"), "--grpc-tls-key", str(pki / "server.key")]
    client_tls = ["--tls-ca", str(pki / "ca.crt"), "--tls-cert", str(pki / "client.crt")]
    client_tls += ["--tls-key", str(pki / "client.key")]
    argv = ["-r", str(repo), "--gateway", *FREE_PORTS, *server_tls, "--grpc-tls-ca", str(pki / "ca.crt")]
    serve = Serve([*argv, *client_tls])
    try:
        found = _ready_block(serve.until("Press Ctrl-C"))
        assert "mutual TLS" in serve.text
        assert _open(f"{found['gateway']}/ready")[0] == 200
        tls = Tls(pki / "ca.crt", pki / "client.crt", pki / "client.key")
        assert _simple_serving_labels(repo, found["gateway"]) == _grpc_labels(repo, found["grpc"], tls)
        serve.proc.send_signal(signal.SIGTERM)
        assert serve.wait() == 0, serve.text
    finally:
        serve.kill()
    assert group_members(found["gateway_pid"]) == [] and group_members(found["triton_pid"]) == []


def test_gateway_options_that_cannot_work_are_refused_before_anything_starts(tmp_path, pki, capsys):  # noqa: F811
    repo = tmp_path / "models"  # never read: each refusal comes first
    server_tls = ["--grpc-tls-cert", str(pki / "server.crt"), "--grpc-tls-key", str(pki / "server.key")]
    mutual = [*server_tls, "--grpc-tls-ca", str(pki / "ca.crt")]
    cases = [
        (["--tls-ca", str(pki / "ca.crt")], "configure the gateway, and no --gateway was given"),
        (["--gateway-port", "9999"], "--gateway-port configure the gateway"),
        (["--gateway", "--tls-ca", str(pki / "ca.crt")], "this one serves plain gRPC"),
        (["--gateway", *server_tls], "has no CA to trust its certificate"),
        (["--gateway", *mutual, "--tls-ca", str(pki / "ca.crt")], "the gateway has none"),
    ]
    for options, message in cases:
        assert main(["serve", "-r", str(repo), *options]) == 2, options
        err = capsys.readouterr().err
        assert message in err and "fix:" in err, err
    # A taken gateway port is found before Triton starts (it would otherwise load every model first).
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        t0 = time.monotonic()
        assert main(["serve", "-r", str(repo), "--gateway", "--gateway-port", str(port)]) == 2
        assert time.monotonic() - t0 < 5
    err = capsys.readouterr().err
    assert f"127.0.0.1:{port} for the gateway endpoint" in err and "--gateway-port" in err
