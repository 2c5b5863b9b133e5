"""A body over the gateway's --max-body-bytes, as a real gateway process answers it over real HTTP: a client that
sends its whole body before it reads (Python's urllib.request) reads the 413, whose message names the limit and the
fix, because a refused body of up to --max-body-bytes + DISCARD_BYTES is read and thrown away first (the lingering
close); a body past that bound gets its connection closed, and the gateway serves the next request. No Triton is
needed: the body is refused before Triton is asked."""

from __future__ import annotations

import http.client
import json
import re
import socket
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from ernie_deploy.gateway.bodies import DISCARD_BYTES, DISCARD_S
from ernie_deploy.gateway.defaults import DEFAULT_MAX_BODY_BYTES
from ernie_deploy.server.preflight import free_ports
from tests.conftest import artifacts

pytestmark = pytest.mark.integration

SEQ = "news"
BOUND = DEFAULT_MAX_BODY_BYTES + DISCARD_BYTES  # the largest refused body read to its end
GATEWAY_MD = Path(__file__).resolve().parents[1] / "docs" / "GATEWAY.md"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory, tiny_pipeline):
    """A gateway with the default body limit, in front of a Triton that is not there."""
    from ernie_deploy.gateway.process import GatewayProcess
    from ernie_deploy.repository.build import build
    from ernie_deploy.repository.options import BuildOptions

    work = tmp_path_factory.mktemp("gateway_413")
    build(artifacts(tiny_pipeline, SEQ), work / "models", BuildOptions(runtime="python"))
    (port,) = free_ports(1, "127.0.0.1")
    process = GatewayProcess(work / "models", f"127.0.0.1:{port}", log_file=work / "gateway.log")
    with process.start(timeout=60, ready=False):
        yield process


def _urllib_post(url: str, body) -> urllib.error.HTTPError:
    request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=60)
    return refused.value


def _declared_past_the_bound(gateway, path: str, start: str) -> tuple[str, str]:
    """(head, body) of the answer to a POST whose Content-Length is past the bound, of which only `start` is sent,
    read until the gateway closes the connection."""
    with socket.create_connection((gateway.host, gateway.port), timeout=10) as sock:
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: {gateway.host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {BOUND + 1}\r\n\r\n{start}".encode()
        )
        answer = b""
        while chunk := sock.recv(65536):  # until the gateway closes
            answer += chunk
    head, _, body = answer.decode().partition("\r\n\r\n")
    return head, body


def _names_the_limit_and_the_fix(message: str) -> None:
    assert f"over this gateway's limit of {DEFAULT_MAX_BODY_BYTES:,} (--max-body-bytes)" in message, message
    assert "; fix: send at most --max-body-bytes bytes" in message and "larger --max-body-bytes" in message, message


def test_urllib_reads_the_413_of_an_8_mb_body(gateway):
    body = b'{"inputs": "' + b"a" * 8_000_000 + b'"}'
    refused = _urllib_post(f"{gateway.url}/hf/{SEQ}", body)
    assert refused.code == 413
    answer = json.loads(refused.read())
    assert answer["error_type"] == "validation"
    _names_the_limit_and_the_fix(answer["error"])
    assert f"{len(body):,} bytes" in answer["error"]
    # Chunked (no Content-Length): refused once the bytes that came in pass the limit, the rest thrown away.
    chunks = (body[i : i + 65536] for i in range(0, len(body), 65536))
    refused = _urllib_post(f"{gateway.url}/models/{SEQ}", chunks)
    assert refused.code == 413
    _names_the_limit_and_the_fix(json.loads(refused.read())["detail"])


def test_urllib_reads_the_404_of_an_unknown_model_sent_an_8_mb_body(gateway):
    """Refused before its body is read (no such model), the body is thrown away first all the same."""
    body = b'{"inputs": "' + b"a" * 8_000_000 + b'"}'
    refused = _urllib_post(f"{gateway.url}/hf/no_such_model", body)
    assert refused.code == 404
    assert "no model 'no_such_model'" in json.loads(refused.read())["error"]
    # Past the bound it is answered at once and the connection closed, without reading the body.
    head, _ = _declared_past_the_bound(gateway, "/models/no_such_model", "{")
    assert head.startswith("HTTP/1.1 404") and "connection: close" in head.lower(), head


def test_a_drained_body_leaves_the_connection_open_for_the_next_request(gateway):
    connection = http.client.HTTPConnection(gateway.host, gateway.port, timeout=60)
    try:
        connection.request("POST", f"/models/{SEQ}", b"a" * 8_000_000, {"Content-Type": "application/json"})
        response = connection.getresponse()
        assert response.status == 413 and response.getheader("connection") != "close"
        response.read()
        connection.request("GET", "/health")  # the same connection: the body was read to its end
        assert connection.getresponse().status == 200
    finally:
        connection.close()


def test_a_body_past_the_discard_bound_is_closed_and_the_gateway_serves_on(gateway):
    host, port = gateway.host, gateway.port
    # Declared past the bound: answered at once and closed, the body never read.
    head, body = _declared_past_the_bound(gateway, f"/hf/{SEQ}", '{"inputs": ')
    assert head.startswith("HTTP/1.1 413") and "connection: close" in head.lower(), head
    _names_the_limit_and_the_fix(json.loads(body)["error"])
    # Chunked past the bound: the gateway closes once it has thrown the bound away, while the client still sends.
    sent, mib = 0, b"a" * (1 << 20)
    with socket.create_connection((host, port), timeout=30) as sock:
        sock.sendall(f"POST /models/{SEQ} HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\n".encode())
        with pytest.raises((BrokenPipeError, ConnectionResetError)):
            while sent < 4 * BOUND:
                sock.sendall(b"%x\r\n%s\r\n" % (len(mib), mib))
                sent += len(mib)
    assert BOUND < sent < 4 * BOUND
    # The gateway serves on: the next over-limit body still gets its 413.
    refused = _urllib_post(f"{gateway.url}/hf/{SEQ}", b"a" * (DEFAULT_MAX_BODY_BYTES + 1))
    assert refused.code == 413


def test_the_bound_is_the_one_docs_gateway_states():
    text = " ".join(GATEWAY_MD.read_text(encoding="utf-8").split())
    found = re.search(r"read to its end and thrown away up to (\d+) MiB past it, for at most (\d+) s", text)
    assert found, f"{GATEWAY_MD} does not state the discard bound"
    assert (int(found[1]) * 2**20, float(found[2])) == (DISCARD_BYTES, DISCARD_S)
