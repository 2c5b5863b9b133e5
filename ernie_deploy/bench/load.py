"""Load on a running server: the asyncio gRPC load generator (closed loop: `run_load`; open loop: `run_open_loop`).
perf_analyzer, the other driver of the served rows, is in bench/perf_analyzer.py."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ernie_deploy.bench.machine import self_cpu_seconds
from ernie_deploy.bench.rows import Row, chunks, summarize
from ernie_deploy.client.grpc_client import grpc_client, input_columns
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.core.tasks import TaskSpec
from ernie_deploy.core.tls import Tls
from ernie_deploy.server.procs import group_cpu_seconds
from ernie_deploy.server.stats import snapshot, steps_between

# -- the asyncio load generator ---------------------------------------------------------------------


@dataclass
class PreparedRequest:
    inputs: list  # tritonclient InferInput, serialized once
    size: int  # texts in it


def prepare_requests(task: TaskSpec, texts: Sequence, batch: int) -> list[PreparedRequest]:
    """Every request serialized once, up front, so that the load generator (which shares the cores with the
    server) spends its time sending, not encoding. Pair models get (text, text_pair) items as two tensors."""
    from tritonclient.grpc import InferInput

    requests = []
    for chunk in chunks(texts, batch):
        tensors = []
        for spec, column in zip(task.inputs, input_columns(task, chunk)):
            data = np.array([t.encode("utf-8") for t in column], dtype=np.object_).reshape(-1, 1)
            tensor = InferInput(spec.name, list(data.shape), "BYTES")
            tensor.set_data_from_numpy(data)
            tensors.append(tensor)
        requests.append(PreparedRequest(tensors, len(chunk)))
    return requests


@dataclass
class LoadResult:
    latencies_s: list[float] = field(default_factory=list)
    sequences: int = 0
    seconds: float = 0.0
    errors: int = 0
    error_messages: list[str] = field(default_factory=list)
    client_cpu_s: float = 0.0
    server_cpu_s: float | None = None
    steps: dict | None = None  # per pipeline step, from the server's statistics (server.stats.steps_between)


# What one request's sender returns: None when the answer came back well formed, else what was wrong with it.
Send = Callable[[Any], Awaitable[str | None]]


async def closed_loop(
    send: Send,
    requests: Sequence,
    concurrency: int,
    warmup_s: float,
    duration_s: float,
    count: int | None,
    server_pgid: int | None,
    probe: Callable[[], Callable[[], dict]] | None = None,
) -> LoadResult:
    """`concurrency` workers on one event loop, each sending the next request (items with a `size`, the texts in
    it) as soon as its last one was answered: a warm-up first, then `duration_s` (or `count` requests in all)
    measured, with this process's and the server group's CPU time over the measured part. The protocol lives in
    `send`, so every served row (gRPC to Triton, HTTP to the peer) is driven and counted the same way. `probe`, called
    just before the measured part, returns what to call just after it: the per-step numbers over it."""
    import asyncio

    result = LoadResult()
    cursor = [0]  # next request index, shared by the workers: texts cycle through the split

    def failed(message: str) -> None:
        result.errors += 1
        if len(result.error_messages) < 3 and message not in result.error_messages:
            result.error_messages.append(message)

    async def worker(until: float, budget: list[int] | None, record: bool) -> None:
        while True:
            if budget is not None:
                if budget[0] <= 0:
                    return
                budget[0] -= 1
            elif time.perf_counter() >= until:
                return
            request = requests[cursor[0] % len(requests)]
            cursor[0] += 1
            t0 = time.perf_counter()
            problem = await send(request)
            t1 = time.perf_counter()
            if problem is not None:
                failed(problem)
            elif record:
                result.latencies_s.append(t1 - t0)
                result.sequences += request.size

    if warmup_s > 0:
        until = time.perf_counter() + warmup_s
        await asyncio.gather(*(worker(until, None, False) for _ in range(concurrency)))
    # A blocking call between the phases, not during one: no request is in flight.
    finish = probe() if probe else None
    cpu0, server0 = self_cpu_seconds(), group_cpu_seconds(server_pgid)
    start = time.perf_counter()
    budget = [count] if count else None
    await asyncio.gather(*(worker(start + duration_s, budget, True) for _ in range(concurrency)))
    result.seconds = time.perf_counter() - start
    result.client_cpu_s = self_cpu_seconds() - cpu0
    server1 = group_cpu_seconds(server_pgid)
    result.server_cpu_s = server1 - server0 if server0 is not None and server1 is not None else None
    if finish is not None:
        result.steps = finish()
    return result


def named_outputs(model: ModelSpec, asked: tuple[str, ...] = ()) -> list:
    """The outputs a load request names: what the project's clients name (core.io.Wire.read_specs), so that the
    answers computed on request only (core.tasks.ON_REQUEST) are computed only when `asked`."""
    from tritonclient.grpc import InferRequestedOutput

    return [InferRequestedOutput(o.name) for o in model.wire.read_specs(asked)]


async def _drive(
    url: str,
    model: ModelSpec,
    requests: list[PreparedRequest],
    concurrency: int,
    warmup_s: float,
    duration_s: float,
    count: int | None,
    server_pgid: int | None,
    stats_url: str | None,
    tls: Tls | None,
    asked: tuple[str, ...],
) -> LoadResult:
    from tritonclient.utils import InferenceServerException

    outputs = named_outputs(model, asked)

    def probe() -> Callable[[], dict]:
        before = snapshot(stats_url)
        return lambda: steps_between(before, snapshot(stats_url), model.name)

    async with grpc_client(url, tls, aio=True) as client:

        async def send(request: PreparedRequest) -> str | None:
            try:
                response = (await client.infer(model.name, request.inputs, outputs=outputs)).get_response()
            except InferenceServerException as exc:
                return exc.message() or str(exc)
            # A cheap structural check; decoding every answer would cost the client more than the server.
            if len(response.outputs) == len(outputs) and all(o.shape[:1] == [request.size] for o in response.outputs):
                return None
            return f"malformed response: outputs {[(o.name, list(o.shape)) for o in response.outputs]}"

        return await closed_loop(
            send, requests, concurrency, warmup_s, duration_s, count, server_pgid, probe if stats_url else None
        )


def run_load(
    url: str,
    model: ModelSpec,
    requests: list[PreparedRequest],
    concurrency: int,
    *,
    warmup_s: float = 1.0,
    duration_s: float = 10.0,
    count: int | None = None,
    server_pgid: int | None = None,
    stats_url: str | None = None,
    tls: Tls | None = None,
    asked: tuple[str, ...] = (),
) -> LoadResult:
    """`concurrency` workers send requests back to back (after a warm-up) for `duration_s`, or `count`
    requests in all; one gRPC channel, one event loop. `stats_url` (the server's HTTP endpoint): also each
    pipeline step's queue and compute time over the measurement, from the server's statistics. `tls`: gRPC over TLS.
    `asked`: the answers computed on request only (core.tasks.ON_REQUEST) to name as well, as `--all-scores` does."""
    import asyncio

    return asyncio.run(
        _drive(url, model, requests, concurrency, warmup_s, duration_s, count, server_pgid, stats_url, tls, asked)
    )


@dataclass
class OpenLoopResult:
    """Requests sent at a fixed rate whatever the answers: accepted ones with their latencies, refused ones."""

    offered: int = 0
    seconds: float = 0.0
    latencies_s: list[float] = field(default_factory=list)
    refused: int = 0  # UNAVAILABLE: a step's queue was full or its queue timeout passed
    errors: int = 0  # anything else
    error_messages: list[str] = field(default_factory=list)


# Triton's words when a queue policy refuses a request (status UNAVAILABLE), measured on the pip server 2.51.
REFUSALS = ("Exceeds maximum queue size", "Request timeout expired")


async def _open_loop(
    url: str, model: ModelSpec, requests: list[PreparedRequest], rate: float, duration_s: float, tls: Tls | None
):
    import asyncio

    from tritonclient.utils import InferenceServerException

    outputs = named_outputs(model)
    result = OpenLoopResult()

    async def one(client, request: PreparedRequest) -> None:
        t0 = time.perf_counter()
        try:
            await client.infer(model.name, request.inputs, outputs=outputs, client_timeout=60)
        except InferenceServerException as exc:
            message = exc.message() or str(exc)
            if any(words in message for words in REFUSALS):
                result.refused += 1
            else:
                result.errors += 1
                if len(result.error_messages) < 3:
                    result.error_messages.append(message)
            return
        result.latencies_s.append(time.perf_counter() - t0)

    async with grpc_client(url, tls, aio=True) as client:
        pending = []
        start = time.perf_counter()
        n = max(1, int(rate * duration_s))
        for i in range(n):
            # Arrivals on a fixed schedule: a late loop catches up at once instead of lowering the rate.
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            pending.append(asyncio.ensure_future(one(client, requests[i % len(requests)])))
        await asyncio.gather(*pending)
        result.offered, result.seconds = n, time.perf_counter() - start
    return result


def run_open_loop(
    url: str, model: ModelSpec, requests: list[PreparedRequest], rate: float, duration_s: float, tls: Tls | None = None
) -> OpenLoopResult:
    """Send `rate` requests a second for `duration_s`, each without waiting for earlier answers (an open loop: how
    traffic arrives from many independent users), and wait for every answer."""
    import asyncio

    return asyncio.run(_open_loop(url, model, requests, rate, duration_s, tls))


def load_row(model: ModelSpec, kind: str, batch: int, concurrency: int, result: LoadResult) -> Row:
    row = summarize(
        Row(model.artifact_name, kind, batch, concurrency), result.latencies_s, result.sequences, result.seconds
    )
    row.errors = result.errors
    row.steps = result.steps
    if row.requests:
        row.client_cpu_ms = 1000 * result.client_cpu_s / row.requests
    if row.sequences and result.server_cpu_s is not None:
        row.server_cpu_ms = 1000 * result.server_cpu_s / row.sequences
    if result.error_messages:
        row.note = "errors: " + " | ".join(m.splitlines()[0][:160] for m in result.error_messages)
    return row
