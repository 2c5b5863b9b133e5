"""The peer rows: PaddleNLP's SimpleServing (benchmarks/peer) on each model it can serve, its answers checked
against in-process ONNX and the split's labels, then loaded like the served rows: the same texts, concurrency cells,
duration and closed loop (bench.load.closed_loop), over aiohttp keep-alive connections."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.peer.server import PeerServer, peer_predictions, peer_serves, request_body
from ernie_deploy.bench.config import BenchConfig
from ernie_deploy.bench.load import LoadResult, closed_loop, load_row
from ernie_deploy.bench.rows import PEER, PEER_BATCH, Row, chunks, tick
from ernie_deploy.core.errors import ServerNotReadyError
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.core.tasks import TaskSpec
from ernie_deploy.evaluate.inputs import ModelInputs, reference_predictions
from ernie_deploy.fetch.data import data_dir, read_split_file, split_file


@dataclass
class PeerRequest:
    body: bytes  # serialized once, up front, as the served rows' requests are
    size: int  # texts in it


def prepare_peer_requests(model: ModelSpec, texts: list, batch: int) -> list[PeerRequest]:
    task, length = model.task_spec, model.max_seq_len
    return [PeerRequest(request_body(task, chunk, length), len(chunk)) for chunk in chunks(texts, batch)]


def gold_labels(task: TaskSpec, items: list) -> list | None:
    """The test split's label of each text, or None when a text is not in the split (texts given by hand)."""

    path = split_file(data_dir(task.dataset), "test", task.split_format)
    if not path.exists():
        return None
    texts, labels = read_split_file(path)
    gold = {(tuple(t) if isinstance(t, list) else t): label for t, label in zip(texts, labels)}
    found = [gold.get(tuple(i) if isinstance(i, list) else i) for i in items]
    return None if any(label is None for label in found) else found


async def _peer_load(url, requests, concurrency, warmup_s, duration_s, count, server_pgid) -> LoadResult:
    import asyncio

    import aiohttp

    headers = {"Content-Type": "application/json"}
    connector = aiohttp.TCPConnector(limit=concurrency)  # one keep-alive connection per worker
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as session:

        async def send(request: PeerRequest) -> str | None:
            try:
                async with session.post(url, data=request.body, headers=headers) as response:
                    payload = await response.read()
                    if response.status != 200:
                        return f"HTTP {response.status}: {payload[:160].decode(errors='replace')}"
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                return f"{type(exc).__name__}: {exc}"
            # The served rows' structural check: one label per text (a small body; parsing it costs microseconds).
            try:
                ok = len(json.loads(payload)["result"]["label"]) == request.size
            except (ValueError, KeyError, TypeError):
                ok = False
            return None if ok else f"malformed response: {payload[:160].decode(errors='replace')}"

        return await closed_loop(send, requests, concurrency, warmup_s, duration_s, count, server_pgid)


def run_peer_load(
    url: str,
    requests: list[PeerRequest],
    concurrency: int,
    *,
    warmup_s: float = 1.0,
    duration_s: float = 10.0,
    count: int | None = None,
    server_pgid: int | None = None,
) -> LoadResult:
    """`concurrency` workers posting back to back (bench.load.closed_loop) over aiohttp keep-alive connections."""
    import asyncio

    return asyncio.run(_peer_load(url, requests, concurrency, warmup_s, duration_s, count, server_pgid))


def bench_peer(inputs: list[ModelInputs], config: BenchConfig, workdir: Path, progress=None) -> tuple[dict, list[Row]]:
    """For each model SimpleServing can serve: start it, check its answers on every text of the run against
    in-process ONNX (what the served rows answer) and against the split's labels, load it at every concurrency
    with 1 and `client_batch` texts per request, stop it. Returns (server facts, rows)."""
    from importlib import metadata

    source = f"PaddleNLP SimpleServing, paddlenlp {metadata.version('paddlenlp')}, one process per model"
    info: dict = {"source": source, "start_seconds": None, "tasks": {}}
    rows: list[Row] = []
    for item in inputs:
        model, name = item.model, item.model.artifact_name
        if not peer_serves(model):
            info["tasks"][name] = {"skipped": f"no SimpleServing handler for a {model.kind!r} model"}
            continue
        server = PeerServer(item.static.root, model, log_file=workdir / f"peer_{name}.log")
        server.start(timeout=config.server_timeout_s)
        try:
            t0 = time.perf_counter()
            peer_predictions(server.url, model, item.texts[:1])
            facts = {"start_seconds": server.start_seconds, "cold_ms": 1000 * (time.perf_counter() - t0)}
            facts["log"] = str(server.log_path)
            answers = peer_predictions(server.url, model, item.texts)
            expected = reference_predictions(item, item.texts)
            facts["checked"] = len(answers)
            facts["agree"] = sum(a == b for a, b in zip(answers, expected))
            gold = gold_labels(item.task, item.texts)
            if gold is not None:
                facts["accuracy"] = sum(a == g for a, g in zip(answers, gold)) / len(gold)
                facts["onnx_accuracy"] = sum(e == g for e, g in zip(expected, gold)) / len(gold)
            info["tasks"][name] = facts
            info["start_seconds"] = max(info["start_seconds"] or 0.0, server.start_seconds)
            variants = [(PEER, 1)] + ([(PEER_BATCH, config.client_batch)] if config.client_batch > 1 else [])
            for kind, batch in variants:
                requests = prepare_peer_requests(model, item.texts, batch)
                for concurrency in config.concurrency:
                    result = run_peer_load(
                        server.url,
                        requests,
                        concurrency,
                        warmup_s=config.warmup_s,
                        duration_s=config.duration_s,
                        count=config.requests,
                        server_pgid=server.pid,
                    )
                    row = load_row(model, kind, batch, concurrency, result)
                    rows.append(row)
                    tick(progress, row)
            if not server.is_running():
                raise ServerNotReadyError(
                    f"SimpleServing exited during the benchmark (log: {server.log_path})",
                    "read the log; bench without the peer with --no-peer",
                )
        finally:
            server.stop()
    return info, rows
