"""`python -m benchmarks.gateway_profile`: where one lone request's time goes through the HTTP gateway, phase by
phase, against the same request over direct gRPC, on one tritonserver serving the classifier.

Method: perf counters. The gateway runs as its own process (this module's `serve`: the gateway's app under uvicorn
as `ernie-deploy gateway` serves it, with timers wrapped around its phases; nothing in the package is changed).
Every timer is `time.perf_counter_ns()`, CLOCK_MONOTONIC, which this process (the client) and the gateway share, so
the client's send and read and the gateway's marks lie on one clock. One request at a time (c1), `--route`'s body
(SimpleServing's by default), `--requests` of them after a warm-up, on one keep-alive connection (the client of
benchmarks/gateway.py); then the same texts over direct gRPC from the same process (tritonclient's asyncio client,
the request tensors built once, as bench.load sends them). Each phase is its median over the requests (so the
phases need not add up to the median total); the wrappers add a few microseconds a request. With `--cprofile`, the
gateway's event loop also runs under cProfile: the CPU each function takes, beside the phases' wall time.

The phases of a request through the gateway, in order:
- http_in: the client's write to the gateway's first read of it (loopback, the kernel waking the gateway);
- http_parse: uvicorn's protocol reading the request (httptools) and making its ASGI task;
- loop_to_app: from there until the task runs the app (one turn of the event loop);
- routing: Starlette's middleware and routing to the handler;
- body, json, contract: reading the body, json.loads, the contract's checks (gateway.bodies);
- tensors: the request tensors (client.grpc_client.input_columns and wire_inputs);
- grpc: the awaited gRPC call to Triton (tritonclient's asyncio infer), its answer included;
- answers: the answer tensors renamed and read back (client.wire.native_answers);
- split: Triton.infer around its one Triton request (splitting a request past max_batch_size);
- grpc_other: Triton._infer's own lines (its requested outputs, InferResult.as_numpy);
- kind_json: the kind's JSON and its `asks` (kinds/<kind>/gateway.py: the score parameters' checks);
- response_json: encoding that JSON (the handler's JSONResponse);
- metrics: the gateway's Prometheus series (Metrics.observe);
- handler_other: the handler's time in none of the phases above;
- send: from the handler's return to the body handed to uvicorn (Starlette's way back);
- http_out: uvicorn writing the answer to the client's read of all of it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.gateway import _Connection, build_classifier
from ernie_deploy.bench.load import prepare_requests
from ernie_deploy.bench.machine import run_record
from ernie_deploy.client.grpc_client import grpc_client
from ernie_deploy.core.files import write_json
from ernie_deploy.core.tasks import DEMO_MODELS
from ernie_deploy.evaluate.inputs import ModelInputs
from ernie_deploy.gateway.process import GatewayProcess
from ernie_deploy.server.process import TritonServer
from ernie_deploy.server.procs import group_cpu_seconds

NAME = "gw_profile"
PHASES = (
    "http_in",
    "http_parse",
    "loop_to_app",
    "routing",
    "body",
    "json",
    "contract",
    "tensors",
    "grpc",
    "answers",
    "split",
    "grpc_other",
    "kind_json",
    "response_json",
    "metrics",
    "handler_other",
    "send",
    "http_out",
)
MARKS_PATH = "/_profile/marks"
# With --cprofile, the gateway runs under cProfile (its event loop's thread) and writes its stats here when the
# client reads the marks: what each function costs in CPU, beside the phases' wall time.
CPROFILE_ENV = "ERNIE_DEPLOY_GATEWAY_CPROFILE"
PROFILER: list = []
# The phases that are the gateway's own work or waiting, not the gRPC call or the client's two loopback hops.
OWN = tuple(p for p in PHASES if p not in ("grpc", "http_in", "http_out"))


# -- the instrumented gateway (run in its own process) --------------------------------------------------------------
def _instrument(marks: list[dict]) -> None:
    """Timers around the gateway's phases: per request a dict of phase -> ns, appended to `marks`."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    from ernie_deploy.gateway import app as gateway_app
    from ernie_deploy.gateway import bodies, metrics, triton

    now = time.perf_counter_ns
    state: dict = {}

    def timed(owner, name: str, phase: str, is_async: bool = False) -> None:
        inner = getattr(owner, name)

        if is_async:

            async def wrapper(*a, **kw):
                t0 = now()
                try:
                    return await inner(*a, **kw)
                finally:
                    state[phase] = state.get(phase, 0) + now() - t0
        else:

            def wrapper(*a, **kw):
                t0 = now()
                try:
                    return inner(*a, **kw)
                finally:
                    state[phase] = state.get(phase, 0) + now() - t0

        setattr(owner, name, wrapper)

    received = HttpToolsProtocol.data_received

    def data_received(self, data):
        if "recv" not in state:
            state["recv"] = now()
        received(self, data)
        state.setdefault("parsed", now())

    HttpToolsProtocol.data_received = data_received

    timed(bodies, "read_body", "body", is_async=True)
    timed(bodies, "parse_json", "json")
    timed(bodies, "simple_serving", "contract")
    timed(bodies, "hugging_face", "contract")
    timed(triton, "input_columns", "tensors")
    timed(triton, "wire_inputs", "tensors")
    timed(triton, "native_answers", "answers")
    timed(gateway_app, "JSONResponse", "response_json")
    timed(metrics.Metrics, "observe", "metrics")
    timed(triton.Triton, "infer", "infer_all", is_async=True)
    timed(triton.Triton, "_infer", "infer_one", is_async=True)
    for kind_json in gateway_app.KIND_JSON.values():
        for name in ("simple_serving", "hugging_face"):
            plain = getattr(kind_json, name)
            holder = argparse.Namespace(f=plain)
            timed(holder, "f", "kind_json")
            object.__setattr__(kind_json, name, holder.f)
        holder = argparse.Namespace(f=kind_json.asks)
        timed(holder, "f", "kind_json")
        object.__setattr__(kind_json, "asks", holder.f)

    opened = triton.Triton.open

    def open_(self):
        opened(self)
        timed(self.client, "infer", "grpc", is_async=True)

    triton.Triton.open = open_
    inference = gateway_app.Gateway._inference

    async def _inference(self, *a, **kw):
        state["handler"] = now()
        try:
            return await inference(self, *a, **kw)
        finally:
            state["handler_end"] = now()

    gateway_app.Gateway._inference = _inference
    made = gateway_app.Gateway.app

    def app(self):
        starlette = made(self)

        async def outer(scope, receive, send):
            if scope["type"] != "http":
                return await starlette(scope, receive, send)
            if scope["path"] == MARKS_PATH:  # the marks so far, read by the client before it stops the gateway
                if PROFILER:
                    PROFILER[0].disable()
                    PROFILER[0].dump_stats(os.environ[CPROFILE_ENV])
                body = json.dumps(marks).encode()
                headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
                await send({"type": "http.response.start", "status": 200, "headers": headers})
                return await send({"type": "http.response.body", "body": body})
            state["app"] = now()

            async def sent(message):
                if message["type"] == "http.response.body" and not message.get("more_body"):
                    state["sending"] = now()
                await send(message)

            await starlette(scope, receive, sent)
            if "handler" in state:  # an inference route's request
                marks.append(dict(state))
            state.clear()

        return outer

    gateway_app.Gateway.app = app


def serve(argv: list[str]) -> None:
    """The gateway, timed, until SIGTERM; its marks answered at GET MARKS_PATH."""
    import uvicorn

    from ernie_deploy.gateway.app import Gateway, GatewaySettings

    p = argparse.ArgumentParser(allow_abbrev=False)
    p.add_argument("--repository", type=Path, required=True)
    p.add_argument("--grpc-url", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    args = p.parse_args(argv)
    marks: list[dict] = []
    _instrument(marks)
    if os.environ.get(CPROFILE_ENV):
        import cProfile

        PROFILER.append(cProfile.Profile())
        PROFILER[0].enable()
    gateway = Gateway(GatewaySettings(repository=args.repository, grpc_url=args.grpc_url))
    config = uvicorn.Config(
        gateway.app(), host=args.host, port=args.port, workers=1, log_level="warning", access_log=False
    )
    uvicorn.Server(config).run()


# -- the client ----------------------------------------------------------------------------------------------------
async def _through_gateway(host: str, port: int, raw: list[bytes], warmup: int) -> list[tuple[int, int]]:
    """(sent, read) ns of each request, one at a time on one keep-alive connection."""

    connection = _Connection(host, port)
    out = []
    for i, request in enumerate(raw):
        t0 = time.perf_counter_ns()
        status, body = await connection.post(request)
        t1 = time.perf_counter_ns()
        if status != 200:
            raise RuntimeError(f"HTTP {status}: {body[:160]!r}")
        if i >= warmup:
            out.append((t0, t1))
    connection.writer.close()
    return out


async def _direct(url: str, model: str, requests: list, warmup: int) -> list[int]:
    """ns of each request over direct gRPC, one at a time."""

    client = grpc_client(url, aio=True)
    out = []
    try:
        for i, request in enumerate(requests):
            t0 = time.perf_counter_ns()
            await client.infer(model, request.inputs)
            if i >= warmup:
                out.append(time.perf_counter_ns() - t0)
    finally:
        await client.close()
    return out


def breakdown(marks: list[dict], client: list[tuple[int, int]]) -> dict[str, list[float]]:
    """Per phase, each request's ms (the gateway's marks matched with the client's sends in order)."""
    out: dict[str, list[float]] = {p: [] for p in (*PHASES, "total", "in_gateway")}
    inside = ("body", "json", "contract", "tensors", "grpc", "answers", "response_json", "metrics")
    for m, (t0, t1) in zip(marks, client):
        handler = m["handler_end"] - m["handler"]
        parts = {
            "http_in": m["recv"] - t0,
            "http_parse": m["parsed"] - m["recv"],
            "loop_to_app": m["app"] - m["parsed"],
            "routing": m["handler"] - m["app"],
            **{p: m.get(p, 0) for p in inside},
            "split": m["infer_all"] - m["infer_one"],
            "grpc_other": m["infer_one"] - m.get("grpc", 0) - m.get("tensors", 0) - m.get("answers", 0),
            "kind_json": m.get("kind_json", 0),
            "handler_other": handler
            - sum(m.get(p, 0) for p in inside)
            - (m["infer_all"] - m["infer_one"])
            - (m["infer_one"] - m.get("grpc", 0) - m.get("tensors", 0) - m.get("answers", 0))
            - m.get("kind_json", 0),
            "send": m["sending"] - m["handler_end"],
            "http_out": t1 - m["sending"],
            "total": t1 - t0,
            "in_gateway": m["sending"] - m["recv"],
        }
        for phase, ns in parts.items():
            out[phase].append(ns / 1e6)
    return out


def _body(route: str, text: str) -> bytes:
    body = {"data": {"text": [text]}} if route == "simple" else {"inputs": text}
    return json.dumps(body, ensure_ascii=False).encode("utf-8")


def profile(item, workdir: Path, requests: int, warmup: int, route: str = "simple") -> dict:

    repo, model = build_classifier(item, workdir, NAME)
    count = warmup + requests
    texts = [item.texts[i % len(item.texts)] for i in range(count)]
    bodies = [_body(route, t) for t in texts]

    class Timed(GatewayProcess):
        def command(self) -> list[str]:
            return [
                sys.executable, "-m", "benchmarks.gateway_profile", "serve", "--repository", str(self.repository),
                "--grpc-url", self.grpc_url, "--host", self.host, "--port", str(self.port),
            ]  # fmt: skip

    with TritonServer(repo, http_port=0, grpc_port=0, metrics_port=0, log_file=workdir / "server.log") as server:
        grpc_requests = prepare_requests(model.task_spec, texts, 1)
        direct = asyncio.run(_direct(server.grpc_url, NAME, grpc_requests, warmup))
        gateway = Timed(repo, server.grpc_url, log_file=workdir / "gateway.log").start()
        try:
            from benchmarks.gateway import _request_bytes

            path = f"/models/{NAME}" if route == "simple" else f"/hf/{NAME}"
            raw = [_request_bytes(gateway.url + path, b)[2] for b in bodies]
            cpu0 = group_cpu_seconds(gateway.pid)
            client = asyncio.run(_through_gateway(gateway.host, gateway.port, raw, warmup))
            cpu1 = group_cpu_seconds(gateway.pid)
            import urllib.request

            with urllib.request.urlopen(gateway.url + MARKS_PATH, timeout=30) as answer:
                marks = json.loads(answer.read())[warmup:]
        finally:
            gateway.stop()
    phases = breakdown(marks, client)
    medians = {p: statistics.median(v) for p, v in phases.items()}
    direct_ms = statistics.median(direct) / 1e6
    return {
        "route": route,
        "requests": len(client),
        "direct_grpc_p50_ms": direct_ms,
        "gateway_p50_ms": medians["total"],
        "added_p50_ms": medians["total"] - direct_ms,
        "phases_p50_ms": {p: medians[p] for p in PHASES},
        "own_p50_ms": sum(medians[p] for p in OWN),
        "in_gateway_p50_ms": medians["in_gateway"],
        "gateway_cpu_ms_per_request": None if cpu0 is None or cpu1 is None else 1000 * (cpu1 - cpu0) / count,
        "load_average": [round(v, 2) for v in os.getloadavg()],
    }


def render(result: dict) -> str:
    lines = ["| phase | p50 ms |", "|---|---:|"]
    lines += [f"| {p} | {ms:.3f} |" for p, ms in result["phases_p50_ms"].items()]
    lines.append("")
    lines.append(
        f"{result['requests']} lone requests: gateway p50 {result['gateway_p50_ms']:.2f} ms, direct gRPC "
        f"{result['direct_grpc_p50_ms']:.2f} ms ({result['added_p50_ms']:+.2f} ms); the gateway's own phases "
        f"{result['own_p50_ms']:.2f} ms; gateway CPU {result['gateway_cpu_ms_per_request']:.2f} ms a request; load "
        f"average {result['load_average']}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve"]:
        serve(argv[1:])
        return 0

    p = argparse.ArgumentParser(
        prog="python -m benchmarks.gateway_profile", description=__doc__.split("\n\n")[0], allow_abbrev=False
    )
    p.add_argument("--requests", type=int, default=2000, help="lone requests timed (default %(default)s)")
    p.add_argument("--warmup", type=int, default=200, help="requests sent first, not timed (default %(default)s)")
    p.add_argument("--out", type=Path, help="write the result as JSON to this file")
    p.add_argument("--route", choices=("simple", "hf"), default="simple", help="SimpleServing's or Hugging Face's")
    p.add_argument("--cprofile", type=Path, help="also run the gateway under cProfile, its stats written here")
    p.add_argument("--model", default=DEMO_MODELS["seq_cls"], help="a classifier's name (default %(default)s)")
    p.add_argument("--static", help="its exported model folder (default: artifacts/static/<model>)")
    p.add_argument("--onnx", help="its model.onnx (default: artifacts/onnx/<model>/model.onnx)")
    args = p.parse_args(argv)
    item = ModelInputs.load(args.model, static=args.static, onnx=args.onnx, max_texts=1000)
    if args.cprofile:
        os.environ[CPROFILE_ENV] = str(args.cprofile.absolute())
    load_start = [round(v, 2) for v in os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix="ernie-deploy-gateway-profile-") as work:
        measured = profile(item, Path(work), args.requests, args.warmup, args.route)
    record = run_record([])
    result = {"date": record["date"], "machine": record["machine"], "command": record["command"]}
    result |= {"model": item.model.artifact_name, "load_average_start": load_start, **measured}
    print(render(result))
    if args.out:
        write_json(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
