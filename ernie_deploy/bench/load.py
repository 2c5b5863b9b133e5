"""Load on a running server: the asyncio gRPC load generator, and perf_analyzer (NVIDIA's SDK image) as an
alternative driver of the served rows."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ernie_deploy.bench.machine import self_cpu_seconds
from ernie_deploy.bench.rows import Row, chunks, summarize
from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.tasks import TaskSpec
from ernie_deploy.server.procs import group_cpu_seconds

# -- the asyncio load generator ---------------------------------------------------------------------


@dataclass
class PreparedRequest:
    inputs: list  # tritonclient InferInput, serialized once
    size: int  # texts in it


def prepare_requests(task: TaskSpec, texts: Sequence, batch: int) -> list[PreparedRequest]:
    """Every request serialized once, up front, so that the load generator (which shares the cores with the
    server) spends its time sending, not encoding. Pair models get (text, text_pair) items as two tensors."""
    from tritonclient.grpc import InferInput

    from ernie_deploy.client.grpc_client import input_columns

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
) -> LoadResult:
    """`concurrency` workers on one event loop, each sending the next request (items with a `size`, the texts in
    it) as soon as its last one was answered: a warm-up first, then `duration_s` (or `count` requests in all)
    measured, with this process's and the server group's CPU time over the measured part. The protocol lives in
    `send`, so every served row (gRPC to Triton, HTTP to the peer) is driven and counted the same way."""
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
    cpu0, server0 = self_cpu_seconds(), group_cpu_seconds(server_pgid)
    start = time.perf_counter()
    budget = [count] if count else None
    await asyncio.gather(*(worker(start + duration_s, budget, True) for _ in range(concurrency)))
    result.seconds = time.perf_counter() - start
    result.client_cpu_s = self_cpu_seconds() - cpu0
    server1 = group_cpu_seconds(server_pgid)
    result.server_cpu_s = server1 - server0 if server0 is not None and server1 is not None else None
    return result


async def _drive(
    url: str,
    task: TaskSpec,
    requests: list[PreparedRequest],
    concurrency: int,
    warmup_s: float,
    duration_s: float,
    count: int | None,
    server_pgid: int | None,
) -> LoadResult:
    from tritonclient.grpc import InferRequestedOutput
    from tritonclient.grpc.aio import InferenceServerClient
    from tritonclient.utils import InferenceServerException

    outputs = [InferRequestedOutput(o.name) for o in task.outputs]

    async with InferenceServerClient(url=url) as client:

        async def send(request: PreparedRequest) -> str | None:
            try:
                response = (await client.infer(task.ensemble, request.inputs, outputs=outputs)).get_response()
            except InferenceServerException as exc:
                return exc.message() or str(exc)
            # A cheap structural check; decoding every answer would cost the client more than the server.
            if len(response.outputs) == len(outputs) and all(o.shape[:1] == [request.size] for o in response.outputs):
                return None
            return f"malformed response: outputs {[(o.name, list(o.shape)) for o in response.outputs]}"

        return await closed_loop(send, requests, concurrency, warmup_s, duration_s, count, server_pgid)


def run_load(
    url: str,
    task: TaskSpec,
    requests: list[PreparedRequest],
    concurrency: int,
    *,
    warmup_s: float = 1.0,
    duration_s: float = 10.0,
    count: int | None = None,
    server_pgid: int | None = None,
) -> LoadResult:
    """`concurrency` workers send requests back to back (after a warm-up) for `duration_s`, or `count`
    requests in all; one gRPC channel, one event loop."""
    import asyncio

    return asyncio.run(_drive(url, task, requests, concurrency, warmup_s, duration_s, count, server_pgid))


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


async def _open_loop(url: str, task: TaskSpec, requests: list[PreparedRequest], rate: float, duration_s: float):
    import asyncio

    from tritonclient.grpc import InferRequestedOutput
    from tritonclient.grpc.aio import InferenceServerClient
    from tritonclient.utils import InferenceServerException

    outputs = [InferRequestedOutput(o.name) for o in task.outputs]
    result = OpenLoopResult()

    async def one(client, request: PreparedRequest) -> None:
        t0 = time.perf_counter()
        try:
            await client.infer(task.ensemble, request.inputs, outputs=outputs, client_timeout=60)
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

    async with InferenceServerClient(url=url) as client:
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
    url: str, task: TaskSpec, requests: list[PreparedRequest], rate: float, duration_s: float
) -> OpenLoopResult:
    """Send `rate` requests a second for `duration_s`, each without waiting for earlier answers (an open loop: how
    traffic arrives from many independent users), and wait for every answer."""
    import asyncio

    return asyncio.run(_open_loop(url, task, requests, rate, duration_s))


def load_row(task: TaskSpec, kind: str, batch: int, concurrency: int, result: LoadResult) -> Row:
    row = summarize(
        Row(task.artifact_name, kind, batch, concurrency), result.latencies_s, result.sequences, result.seconds
    )
    row.errors = result.errors
    if row.requests:
        row.client_cpu_ms = 1000 * result.client_cpu_s / row.requests
    if row.sequences and result.server_cpu_s is not None:
        row.server_cpu_ms = 1000 * result.server_cpu_s / row.sequences
    if result.error_messages:
        row.note = "errors: " + " | ".join(m.splitlines()[0][:160] for m in result.error_messages)
    return row


# -- perf_analyzer ----------------------------------------------------------------------------------


def perf_analyzer_input(task: TaskSpec, texts: Sequence, path: str | Path) -> Path:
    """The texts as perf_analyzer real input data: one entry per text (or pair), each input a BYTES [1] tensor."""
    from ernie_deploy.client.grpc_client import input_columns

    path = Path(path)
    columns = input_columns(task, list(texts))
    names = [spec.name for spec in task.inputs]
    data = {"data": [{n: {"content": [t], "shape": [1]} for n, t in zip(names, item)} for item in zip(*columns)]}
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


def perf_analyzer_command(
    binary: str,
    model: str,
    url: str,
    input_file: str | Path,
    csv_file: str | Path,
    concurrency: int,
    batch: int = 1,
    duration_s: float = 10.0,
) -> list[str]:
    """One perf_analyzer run at one concurrency (a list like 1,4,8,16 is no start:end:step range)."""
    return [
        binary,
        "-m",
        model,
        "-u",
        url,
        "-i",
        "grpc",
        "-b",
        str(batch),
        "--input-data",
        str(input_file),
        f"--concurrency-range={concurrency}:{concurrency}",
        "--measurement-mode=time_windows",
        f"--measurement-interval={max(1, round(duration_s * 1000))}",
        "-f",
        str(csv_file),
    ]


def parse_perf_analyzer_csv(text: str) -> list[dict]:
    """perf_analyzer's `-f` CSV -> one dict per concurrency, sorted by it: throughput (its Inferences/Second,
    which counts every item of a batch, so sequences/s) and latencies in ms (the CSV has microseconds)."""
    import csv
    import io

    reader = csv.DictReader(io.StringIO(text.strip()))
    if not reader.fieldnames or "Inferences/Second" not in reader.fieldnames:
        raise ErnieDeployError("not a perf_analyzer CSV: no Inferences/Second column")
    rows = []
    for record in reader:
        record = {k.strip(): (v or "").strip() for k, v in record.items() if k}

        def ms(column: str, record: dict = record) -> float | None:
            return float(record[column]) / 1000 if record.get(column) else None

        concurrency = record.get("Concurrency")
        rows.append(
            {
                "concurrency": int(float(concurrency)) if concurrency else None,
                "throughput": float(record["Inferences/Second"]),
                "p50_ms": ms("p50 latency"),
                "p90_ms": ms("p90 latency"),
                "p95_ms": ms("p95 latency"),
                "p99_ms": ms("p99 latency"),
                "mean_ms": ms("Avg latency"),
            }
        )
    return sorted(rows, key=lambda r: (r["concurrency"] is None, r["concurrency"] or 0))


def run_perf_analyzer(
    binary: str,
    task: TaskSpec,
    url: str,
    texts: Sequence[str],
    kind: str,
    batch: int,
    concurrency: int,
    duration_s: float,
    workdir: Path,
) -> Row:
    import subprocess

    input_file = perf_analyzer_input(task, texts, workdir / f"{task.artifact_name}_input.json")
    csv_file = workdir / f"{task.artifact_name}_{kind}_b{batch}_c{concurrency}.csv"
    argv = perf_analyzer_command(binary, task.ensemble, url, input_file, csv_file, concurrency, batch, duration_s)
    proc = subprocess.run(argv, capture_output=True, text=True)
    row = Row(task.artifact_name, kind, batch, concurrency, tool="perf_analyzer")
    if proc.returncode != 0 or not csv_file.exists():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        row.errors = 1
        row.note = f"perf_analyzer exited {proc.returncode}: " + " | ".join(tail)
        return row
    parsed = [r for r in parse_perf_analyzer_csv(csv_file.read_text()) if r["concurrency"] in (concurrency, None)]
    if not parsed:
        row.errors = 1
        row.note = f"perf_analyzer wrote no row for concurrency {concurrency}"
        return row
    got = parsed[0]
    row.throughput, row.p50_ms, row.p95_ms, row.p99_ms, row.mean_ms = (
        got["throughput"],
        got["p50_ms"],
        got["p95_ms"],
        got["p99_ms"],
        got["mean_ms"],
    )
    row.note = "perf_analyzer"
    return row
