"""A gateway as its own process (`ernie-deploy gateway`), for tests and tools: started on a free port in its own
process group, waited for until it answers (and, unless told otherwise, until /ready says 200), stopped with SIGTERM
as a supervisor stops it."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ernie_deploy.core.errors import ServerNotReadyError
from ernie_deploy.server.preflight import free_ports
from ernie_deploy.server.procs import log_tail, start_group, stop_group, wait_http_ok


class GatewayProcess:
    """`ernie-deploy gateway -r repository --grpc-url grpc_url` on `host`:`port` (0: a free port), with `args`
    besides."""

    def __init__(
        self,
        repository: str | os.PathLike,
        grpc_url: str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        args: Sequence[str] = (),
        log_file: str | os.PathLike | None = None,
        ssl_context=None,
    ):
        self.repository = Path(repository).absolute()
        self.grpc_url = grpc_url
        self.host = host
        self.port = port
        self.args = tuple(args)
        self.log_path = Path(log_file).absolute() if log_file else None
        # How wait() reaches an HTTPS gateway (--http-tls-cert): by default without checking its certificate (it is
        # this process's own child on loopback); under mutual TLS pass a context holding a client certificate.
        self.ssl_context = ssl_context
        self._proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        scheme = "https" if "--http-tls-cert" in self.args else "http"
        host = f"[{self.host}]" if ":" in self.host else self.host  # an IPv6 address in a URL
        return f"{scheme}://{host}:{self.port}"

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

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "ernie_deploy.cli", "gateway", "--repository", str(self.repository),
            "--grpc-url", self.grpc_url, "--host", self.host, "--port", str(self.port), *self.args,
        ]  # fmt: skip

    def start(self, timeout: float = 60, ready: bool = True) -> GatewayProcess:
        self.port = self.port or free_ports(1, self.host)[0]
        if self.log_path is None:
            self.log_path = Path(tempfile.mkdtemp(prefix="ernie-deploy-gateway-")) / "gateway.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            self._proc = start_group(self.command(), log, dict(os.environ))
        try:
            self.wait("/ready" if ready else "/health", timeout)
        except BaseException:
            self.stop(timeout=5)
            raise
        return self

    def wait(self, path: str, timeout: float) -> None:
        """Until GET `path` answers 200."""
        import ssl

        context = self.ssl_context
        if context is None:
            context = ssl.create_default_context()
            context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        wait_http_ok(self._proc, self.url + path, timeout, self._fail, name="the gateway", context=context)

    def _fail(self, what: str, timed_out: bool = False) -> None:
        raise ServerNotReadyError(
            f"{what} (log: {self.log_path})\n  last log lines:\n{log_tail(self.log_path)}",
            "read the log; check the Triton server it calls is up (--grpc-url)",
        )

    def stop(self, timeout: float = 15) -> int | None:
        """SIGTERM (uvicorn finishes the requests in flight and exits), then SIGKILL after `timeout`."""
        if self._proc is None:
            return None
        return stop_group(self._proc, timeout)

    def __enter__(self) -> GatewayProcess:
        if not self.is_running():
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
