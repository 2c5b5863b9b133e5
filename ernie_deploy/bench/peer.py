"""The peer a Paddle user would pick: PaddleNLP's SimpleServing on the same static model, started as its own
process (ernie_deploy.bench.peer_app), checked for correct answers, and loaded like the served rows: the same
texts, concurrency cells, duration and closed loop (bench.load.closed_loop), with HTTP JSON as SimpleServing's
clients send it, `{"data": {"text": [...]}, "parameters": {"max_seq_len": ..., "batch_size": ...}}`.

How it differs from the served pipeline, as shipped in paddlenlp 2.8.1 (read from its source, measured here):
- one predictor behind a lock (ModelManager.predict): requests are answered one at a time, nothing is batched
  across requests;
- CustomModelHandler reads `max_seq_len` and `batch_size` only when they are *absent* from the parameters (an
  inverted test), so with the parameters its clients send it always runs batch 1 at max_seq_len 128: a request
  of 8 texts is 8 model runs;
- tokenization is PaddleNLP's Python ErnieTokenizer, text by text (ours: HF tokenizers' Rust WordPiece, a batch
  at a time); the ids are the same on this data (FIELD_NOTES);
- Paddle Inference with MKLDNN and ceil(cores / 2) math threads (its Predictor's choice), where our in-process
  Paddle row gets as many threads as onnxruntime.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ernie_deploy.bench.config import BenchConfig, TaskInputs
from ernie_deploy.bench.load import LoadResult, closed_loop, load_row
from ernie_deploy.bench.peer_app import HANDLERS
from ernie_deploy.bench.rows import PEER, PEER_BATCH, Row, chunks, tick
from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.tasks import TaskSpec
from ernie_deploy.server.procs import start_group, stop_group

CHECK_BATCH = 32  # texts per request when checking answers (the handler runs them one by one anyway)


def peer_available() -> bool:
    """paddlenlp (with its fastapi and uvicorn) is installed."""
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("paddlenlp", "fastapi", "uvicorn", "aiohttp"))


def peer_serves(task: TaskSpec) -> bool:
    """SimpleServing has handlers for this kind of model (a label per text, one text or a pair)."""
    return task.kind in HANDLERS


def route(task: TaskSpec) -> str:
    """Where SimpleServing answers for this model: `models/<name>`, as in PaddleNLP's own serving examples."""
    return f"models/{task.ensemble}"


def request_body(task: TaskSpec, items: list, max_seq_len: int) -> bytes:
    """One request as SimpleServing's clients send it: the texts (and their pairs, under `text_pair`) and the
    parameters its handlers read."""
    from ernie_deploy.client.grpc_client import input_columns

    data = {spec.name: column for spec, column in zip(task.inputs, input_columns(task, items))}
    return json.dumps({"data": data, "parameters": {"max_seq_len": max_seq_len, "batch_size": len(items)}}).encode()


@dataclass
class PeerRequest:
    body: bytes  # serialized once, up front, as the served rows' requests are
    size: int  # texts in it


def prepare_peer_requests(task: TaskSpec, texts: list, batch: int) -> list[PeerRequest]:
    return [PeerRequest(request_body(task, chunk, task.max_seq_len), len(chunk)) for chunk in chunks(texts, batch)]


class PeerServer:
    """PaddleNLP SimpleServing on a static model, in its own process group (so that its CPU time is measured like
    tritonserver's), bound to `host` on a free port unless given one."""

    def __init__(
        self,
        static_root: str | Path,
        task: TaskSpec,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        log_file: str | Path | None = None,
    ):
        if not peer_serves(task):
            raise ErnieDeployError(
                f"PaddleNLP SimpleServing has no handler here for {task.ensemble} (a {task.kind!r} model)",
                f"bench it with --no-peer; the peer serves {', '.join(HANDLERS)} models",
            )
        self.static_root = Path(static_root).absolute()
        self.task = task
        self.host = host
        self.port = port
        self.log_path = Path(log_file).absolute() if log_file else None
        self.start_seconds: float | None = None
        self._proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/{route(self.task)}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace") if self.log_path else ""
        except OSError:
            return ""

    def start(self, timeout: float = 180) -> PeerServer:
        from ernie_deploy.server.preflight import free_ports

        t0 = time.monotonic()
        self.port = self.port or free_ports(1, self.host)[0]
        if self.log_path is None:
            self.log_path = Path(tempfile.mkdtemp(prefix="ernie-deploy-peer-")) / "simple_serving.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "ernie_deploy.bench.peer_app", "--model", str(self.static_root)]
        argv += ["--route", route(self.task), "--kind", self.task.kind, "--host", self.host, "--port", str(self.port)]
        path = os.pathsep.join(filter(None, [_package_root(), os.environ.get("PYTHONPATH")]))
        env = {**os.environ, "PYTHONPATH": path}
        with open(self.log_path, "wb") as log:
            # its own process group: its CPU time is counted, stop() reaches it all
            self._proc = start_group(argv, log, env)
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.stop(timeout=5)
            raise
        self.start_seconds = time.monotonic() - t0
        return self

    def _wait_ready(self, timeout: float) -> None:
        """Until uvicorn answers: it listens only once the app module has built the predictor and tokenizer."""
        import urllib.error
        import urllib.request

        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never via a proxy
        deadline = time.monotonic() + timeout
        while True:
            if self._proc.poll() is not None:
                self._fail(f"SimpleServing exited with code {self._proc.returncode} before it was ready")
            try:
                with opener.open(f"http://{self.host}:{self.port}/docs", timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                self._fail(f"SimpleServing was not ready after {timeout:g} s")
            time.sleep(0.2)

    def _fail(self, what: str) -> None:
        tail = "\n".join("    " + line for line in self.log_text().strip().splitlines()[-12:])
        raise ErnieDeployError(
            f"{what} (log: {self.log_path})\n  last log lines:\n{tail}",
            "read the log; bench without the peer with --no-peer",
        )

    def stop(self, timeout: float = 15) -> int | None:
        """SIGTERM (uvicorn finishes open requests and exits), then SIGKILL to the group after `timeout`."""
        if self._proc is None:
            return None
        return stop_group(self._proc, timeout)

    def __enter__(self) -> PeerServer:
        if not self.is_running():
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _package_root() -> str:
    """The folder holding the ernie_deploy package, so the server process imports this very copy."""
    return str(Path(__file__).resolve().parents[2])


def peer_predictions(url: str, task: TaskSpec, labels: list[str], items: list, batch: int = CHECK_BATCH) -> list:
    """The peer's label for each text (or pair), over HTTP, `batch` texts a request."""
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    found = []
    for start in range(0, len(items), batch):
        chunk = list(items[start : start + batch])
        request = urllib.request.Request(
            url, request_body(task, chunk, task.max_seq_len), {"Content-Type": "application/json"}
        )
        with opener.open(request, timeout=120) as response:
            ids = json.loads(response.read())["result"]["label"]
        if len(ids) != len(chunk):
            raise ErnieDeployError(f"SimpleServing answered {len(ids)} labels for {len(chunk)} texts")
        found += [labels[i] for i in ids]
    return found


def gold_labels(task: TaskSpec, items: list) -> list | None:
    """The test split's label of each text, or None when a text is not in the split (texts given by hand)."""
    from ernie_deploy.fetch.data import data_dir, read_split_file, split_file

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


def bench_peer(inputs: list[TaskInputs], config: BenchConfig, workdir: Path, progress=None) -> tuple[dict, list[Row]]:
    """For each model SimpleServing can serve: start it, check its answers on every text of the run against
    in-process ONNX (what the served rows answer) and against the split's labels, load it at every concurrency
    with 1 and `client_batch` texts per request, stop it. Returns (server facts, rows)."""
    from importlib import metadata

    from ernie_deploy.bench.inprocess import reference_predictions

    source = f"PaddleNLP SimpleServing, paddlenlp {metadata.version('paddlenlp')}, one process per model"
    info: dict = {"source": source, "start_seconds": None, "tasks": {}}
    rows: list[Row] = []
    for item in inputs:
        task = item.task
        if not peer_serves(task):
            info["tasks"][task.artifact_name] = {"skipped": f"no SimpleServing handler for a {task.kind!r} model"}
            continue
        server = PeerServer(item.static.root, task, log_file=workdir / f"peer_{task.artifact_name}.log")
        server.start(timeout=config.server_timeout_s)
        try:
            t0 = time.perf_counter()
            peer_predictions(server.url, task, item.static.labels, item.texts[:1])
            facts = {"start_seconds": server.start_seconds, "cold_ms": 1000 * (time.perf_counter() - t0)}
            facts["log"] = str(server.log_path)
            answers = peer_predictions(server.url, task, item.static.labels, item.texts)
            expected = reference_predictions(item, item.texts)
            facts["checked"] = len(answers)
            facts["agree"] = sum(a == b for a, b in zip(answers, expected))
            gold = gold_labels(task, item.texts)
            if gold is not None:
                facts["accuracy"] = sum(a == g for a, g in zip(answers, gold)) / len(gold)
                facts["onnx_accuracy"] = sum(e == g for e, g in zip(expected, gold)) / len(gold)
            info["tasks"][task.artifact_name] = facts
            info["start_seconds"] = max(info["start_seconds"] or 0.0, server.start_seconds)
            variants = [(PEER, 1)] + ([(PEER_BATCH, config.client_batch)] if config.client_batch > 1 else [])
            for kind, batch in variants:
                requests = prepare_peer_requests(task, item.texts, batch)
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
                    row = load_row(task, kind, batch, concurrency, result)
                    rows.append(row)
                    tick(progress, row)
            if not server.is_running():
                raise ErnieDeployError(f"SimpleServing exited during the benchmark (log: {server.log_path})")
        finally:
            server.stop()
    return info, rows
