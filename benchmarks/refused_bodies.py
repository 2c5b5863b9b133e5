"""`python -m benchmarks.refused_bodies`: what a body over the gateway's --max-body-bytes costs the gateway. Before
its 413, a refused body is read to its end and thrown away up to gateway.bodies.DISCARD_BYTES past the limit (the
lingering close), so that a client that sends its whole body before reading (Python's urllib) reads the 413.

The gateway alone (no Triton: the body is refused before Triton is asked) serves a classifier's repository with the
default limit. One client (`http.client`, one connection a request, over loopback) sends each body `--requests`
times: 8,000,000 bytes and the largest body still read (the limit plus the bound), each with a Content-Length and
chunked (64 KiB chunks). Per body: the gateway's CPU a request (its process's CPU seconds over the requests), the
median wall time a request, and the gateway's resident memory after them and its peak (VmHWM) against before any.
Writes refused-bodies.json.
"""

from __future__ import annotations

import argparse
import http.client
import statistics
import tempfile
import time
from pathlib import Path

from ernie_deploy.bench.machine import run_record
from ernie_deploy.core.files import write_json
from ernie_deploy.evaluate.inputs import ModelInputs
from ernie_deploy.gateway.bodies import DISCARD_BYTES
from ernie_deploy.gateway.defaults import DEFAULT_MAX_BODY_BYTES
from ernie_deploy.gateway.process import GatewayProcess
from ernie_deploy.repository.options import BuildOptions
from ernie_deploy.server.preflight import free_ports
from ernie_deploy.server.procs import group_cpu_seconds

BODIES = {"8 MB": 8_000_000, "at the bound": DEFAULT_MAX_BODY_BYTES + DISCARD_BYTES}
CHUNK = 1 << 16


def _memory_kib(pid: int) -> dict:
    """The process's resident memory now and its peak, KiB (/proc/<pid>/status)."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0])
    return fields


def _post(host: str, port: int, path: str, body: bytes, chunked: bool) -> int:
    connection = http.client.HTTPConnection(host, port, timeout=120)
    try:
        if chunked:
            chunks = (body[i : i + CHUNK] for i in range(0, len(body), CHUNK))
            connection.request("POST", path, chunks, {"Content-Type": "application/json"}, encode_chunked=True)
        else:
            connection.request("POST", path, body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def measure(repo: Path, model: str, requests: int, workdir: Path) -> list[dict]:

    (port,) = free_ports(1, "127.0.0.1")  # a Triton that is not there
    rows = []
    gateway = GatewayProcess(repo, f"127.0.0.1:{port}", log_file=workdir / "gateway.log")
    with gateway.start(timeout=60, ready=False):
        _post(gateway.host, gateway.port, "/health", b"", False)  # the app's first request, before any is measured
        start = _memory_kib(gateway.pid)
        for name, size in BODIES.items():
            body = b'{"inputs": "' + b"a" * (size - 14) + b'"}'
            for chunked in (False, True):
                cpu0, walls = group_cpu_seconds(gateway.pid), []
                for _ in range(requests):
                    t0 = time.perf_counter()
                    status = _post(gateway.host, gateway.port, f"/hf/{model}", body, chunked)
                    walls.append(time.perf_counter() - t0)
                    if status != 413:
                        raise RuntimeError(f"a {len(body):,}-byte body was answered {status}, not 413")
                cpu = (group_cpu_seconds(gateway.pid) - cpu0) / requests
                rows.append(
                    {
                        "body": name,
                        "bytes": len(body),
                        "sent": "chunked" if chunked else "Content-Length",
                        "requests": requests,
                        "gateway_cpu_ms": 1000 * cpu,
                        "wall_ms_p50": 1000 * statistics.median(walls),
                        "memory_kib": _memory_kib(gateway.pid),
                    }
                )
                print(rows[-1], flush=True)
    return [{"memory_kib_before": start}, *rows]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.refused_bodies", description=__doc__.split("\n\n")[0], allow_abbrev=False
    )
    p.add_argument("--model", default="ernie_seqcls", help="the classifier whose route is posted to")
    p.add_argument("--requests", type=int, default=9, help="requests per body and way of sending it")
    p.add_argument("--out", default="docs", help="folder for refused-bodies.json")
    args = p.parse_args(argv)
    from ernie_deploy.repository.build import ModelArtifacts, build

    item = ModelInputs.load(args.model, static=None, onnx=None, data=None, max_texts=1)
    with tempfile.TemporaryDirectory(prefix="ernie-deploy-refused-") as work:
        repo = Path(work) / "models"
        build(ModelArtifacts(item.model, Path(item.onnx), item.static.vocab_file), repo, BuildOptions(runtime="python"))
        rows = measure(repo, item.model.name, args.requests, Path(work))
    record = {**run_record(rows[1:]), "limit_bytes": DEFAULT_MAX_BODY_BYTES, "discard_bytes": DISCARD_BYTES}
    record["rows"] = rows
    write_json(record, Path(args.out) / "refused-bodies.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
