"""Bring back python-backend model stubs that die while the server runs.

Triton 2.51's python backend does not restart a stub that dies (killed, out of memory, a crash in native
code): every later request to that model fails with "Stub process ... is not healthy", while
/v2/health/ready keeps answering 200 (triton-inference-server/server#8604). The launcher therefore runs
the server with explicit model control and this watchdog: it watches the server's stub processes and,
when one is gone, reloads its model through the repository API. A reload with an unchanged config is a
no-op in Triton, so the reload carries a config override that differs only in a counter parameter.

It calls the server's HTTP endpoint, which is plain whatever gRPC is: under mutual TLS the launcher holds no
client certificate, and needs none.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ernie_deploy.server.probe import ProbeFailed, http_json
from ernie_deploy.server.procs import processes

STUB_COMM = "triton_python_"  # /proc/<pid>/comm is cut at 15 characters
RESTART_PARAMETER = "ernie_deploy_restart"


@dataclass(frozen=True)
class StubRestart:
    model: str
    died_at: float  # time.time()
    seconds: float  # from noticing the death to the reloaded model being ready
    ok: bool
    message: str = ""


def stub_processes(server_pid: int, proc: str = "/proc") -> dict[int, str]:
    """Live python-backend stubs started by `server_pid`: pid -> model name (from the model.py path)."""
    stubs = {}
    for p in processes(proc):
        if p.ppid != server_pid or not p.comm.startswith(STUB_COMM) or not p.alive:
            continue
        try:
            with open(f"{proc}/{p.pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue  # gone meanwhile, or not ours to read
        if len(argv) > 1:
            stubs[p.pid] = Path(argv[1].decode(errors="replace")).parent.parent.name
    return stubs


class StubWatchdog(threading.Thread):
    """Polls the server's stubs every `interval` seconds and reloads a model whose stub count dropped, through the
    server's HTTP endpoint `url` (http://host:port)."""

    def __init__(
        self,
        server_pid: int,
        url: str,
        *,
        interval: float = 0.5,
        on_restart: Callable[[StubRestart], None] | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(name=f"stub-watchdog-{server_pid}", daemon=True)
        self.server_pid = server_pid
        self.url = url
        self.interval = interval
        self.on_restart = on_restart
        self.headers = headers  # the admin key's header, where the server restricts its repository API
        self.restarts: list[StubRestart] = []
        self._halt = threading.Event()
        self._expected = Counter(stub_processes(server_pid).values())

    def stop(self) -> None:
        self._halt.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout=5)

    def run(self) -> None:
        while not self._halt.wait(self.interval):
            if not os.path.exists(f"/proc/{self.server_pid}"):
                return  # the server itself is gone: that is the launcher's business, not ours
            now = Counter(stub_processes(self.server_pid).values())
            for model, want in self._expected.items():
                if now[model] < want and not self._halt.is_set():
                    self._reload(model)

    def _ready(self, model: str) -> bool:
        try:
            http_json(f"{self.url}/v2/models/{model}/ready", 10)
        except ProbeFailed:  # 400 while not ready
            return False
        return True

    def _reload(self, model: str) -> None:
        died, t0 = time.time(), time.monotonic()
        try:
            config = http_json(f"{self.url}/v2/models/{model}/config", 10, headers=self.headers)
            params = config.setdefault("parameters", {})
            count = int(params.get(RESTART_PARAMETER, {}).get("string_value", "0")) + 1
            params[RESTART_PARAMETER] = {"string_value": str(count)}
            # A reload waits for the model to load: seconds for a python model, longer for a large ONNX one.
            body = {"parameters": {"config": json.dumps(config)}}
            http_json(f"{self.url}/v2/repository/models/{model}/load", 300, body, headers=self.headers)
            event = StubRestart(model, died, time.monotonic() - t0, self._ready(model))
        except Exception as exc:  # keep watching the other models; the failure is reported
            # a refused HTTP call on one line, its reason only: the fix it carries is for a caller of the API
            why = exc.problem if isinstance(exc, ProbeFailed) else str(exc)
            event = StubRestart(model, died, time.monotonic() - t0, False, why)
        self.restarts.append(event)
        if self.on_restart:
            self.on_restart(event)
