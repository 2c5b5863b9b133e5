"""The peer a Paddle user would pick: PaddleNLP's SimpleServing on the same static model, started as its own
process (benchmarks.peer.app) and asked over HTTP JSON as SimpleServing's clients ask it,
`{"data": {"text": [...]}, "parameters": {"max_seq_len": ..., "batch_size": ...}}`. The benchmark checks its answers
and loads it like the served rows (benchmarks/peer_rows.py).

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
from pathlib import Path

from benchmarks.peer.app import HANDLERS
from ernie_deploy.client.grpc_client import input_columns
from ernie_deploy.core.errors import BadOptionsError, FailedRequestsError, ServerNotReadyError
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.core.tasks import TaskSpec
from ernie_deploy.server.preflight import free_ports
from ernie_deploy.server.procs import log_tail, start_group, stop_group, wait_http_ok

CHECK_BATCH = 32  # texts per request when checking answers (the handler runs them one by one anyway)


def peer_available() -> bool:
    """paddlenlp (with its fastapi and uvicorn) is installed."""
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("paddlenlp", "fastapi", "uvicorn", "aiohttp"))


def peer_serves(model: ModelSpec | TaskSpec) -> bool:
    """SimpleServing has handlers for this kind of model (a label per text, one text or a pair)."""
    return model.kind in HANDLERS


def route(model: ModelSpec) -> str:
    """Where SimpleServing answers for this model: `models/<name>`, as in PaddleNLP's own serving examples."""
    return f"models/{model.name}"


def request_body(task: TaskSpec, items: list, max_seq_len: int) -> bytes:
    """One request as SimpleServing's clients send it: the texts (and their pairs, under `text_pair`) and the
    parameters its handlers read."""

    data = {spec.name: column for spec, column in zip(task.inputs, input_columns(task, items))}
    return json.dumps({"data": data, "parameters": {"max_seq_len": max_seq_len, "batch_size": len(items)}}).encode()


class PeerServer:
    """PaddleNLP SimpleServing on a static model, in its own process group (so that its CPU time is measured like
    tritonserver's), bound to `host` on a free port unless given one."""

    def __init__(
        self,
        static_root: str | Path,
        model: ModelSpec,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        log_file: str | Path | None = None,
    ):
        if not peer_serves(model):
            raise BadOptionsError(
                f"PaddleNLP SimpleServing has no handler here for {model.name} (a {model.kind!r} model)",
                f"bench it with --no-peer; the peer serves {', '.join(HANDLERS)} models",
            )
        self.static_root = Path(static_root).absolute()
        self.model = model
        self.host = host
        self.port = port
        self.log_path = Path(log_file).absolute() if log_file else None
        self.start_seconds: float | None = None
        self._proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/{route(self.model)}"

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

        t0 = time.monotonic()
        self.port = self.port or free_ports(1, self.host)[0]
        if self.log_path is None:
            self.log_path = Path(tempfile.mkdtemp(prefix="ernie-deploy-peer-")) / "simple_serving.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "benchmarks.peer.app", "--model", str(self.static_root)]
        argv += ["--route", route(self.model), "--kind", self.model.kind, "--host", self.host, "--port", str(self.port)]
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

        url = f"http://{self.host}:{self.port}/docs"
        wait_http_ok(self._proc, url, timeout, self._fail, name="SimpleServing", interval=0.2)

    def _fail(self, what: str, timed_out: bool = False) -> None:

        raise ServerNotReadyError(
            f"{what} (log: {self.log_path})\n  last log lines:\n{log_tail(self.log_path)}",
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
    """The checkout's root, which holds benchmarks/ (and ernie_deploy), so the server process imports this very
    copy."""
    return str(Path(__file__).resolve().parents[2])


def peer_predictions(url: str, model: ModelSpec, items: list, batch: int = CHECK_BATCH) -> list:
    """The peer's label (a name of `model`'s labels) for each text (or pair), over HTTP, `batch` texts a request."""
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    found = []
    for start in range(0, len(items), batch):
        chunk = list(items[start : start + batch])
        request = urllib.request.Request(
            url, request_body(model.task_spec, chunk, model.max_seq_len), {"Content-Type": "application/json"}
        )
        with opener.open(request, timeout=120) as response:
            ids = json.loads(response.read())["result"]["label"]
        if len(ids) != len(chunk):
            raise FailedRequestsError(
                f"SimpleServing answered {len(ids)} labels for {len(chunk)} texts",
                "read the peer's log; bench without the peer with --no-peer",
            )
        found += [model.labels[i] for i in ids]
    return found
