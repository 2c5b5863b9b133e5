"""A real `tritonserver` process on a model repository: start it, wait until it is ready, stop it with every
model stub it started; the servers still running are stopped when Python exits. Serving until a signal, with
the admin key a host needs, is server/serve.py's.

Imports stay cheap: nothing here imports paddle or tritonclient at module load.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from ernie_deploy.core.admin_key import AdminKey, check_admin_key, read_admin_key_file
from ernie_deploy.core.endpoints import PORTS
from ernie_deploy.core.errors import BadOptionsError, BadRepositoryError, ServerNotReadyError
from ernie_deploy.core.tls import ServerTls
from ernie_deploy.server.args import grpc_tls_args, restricted_args, server_args
from ernie_deploy.server.binary import TritonBinary, find_tritonserver, prepared_backend_dir, server_env
from ernie_deploy.server.cache import DEFAULT_CACHE_BYTES, cache_directory_args, check_cache
from ernie_deploy.server.logs import likely_fix, log_excerpt
from ernie_deploy.server.preflight import (
    DEFAULT_SHM_BYTE_SIZE,
    PYTHON_BACKEND_GROWTH_BYTE_SIZE,
    check_port_free,
    check_shm,
    free_ports,
)
from ernie_deploy.server.procs import start_group, stop_group, wait_http_ok
from ernie_deploy.server.watchdog import StubWatchdog

_LIVE: set[TritonServer] = set()
_LIVE_LOCK = threading.Lock()


@atexit.register
def _stop_all() -> None:
    with _LIVE_LOCK:
        servers = list(_LIVE)
    for server in servers:
        try:
            server.stop(timeout=10)
        except Exception:
            pass


class TritonServer:
    """A tritonserver process on a model repository, bound to `host` (loopback by default).

    Ports of 0 are replaced by free ports at start(). Use as a context manager, or call start() and
    stop(). Output goes to `log_file` (default: a fresh temporary folder, kept for reading).

    die_with_parent: the server gets SIGTERM when the thread that called start() ends (Linux
    PR_SET_PDEATHSIG), so a killed test run or CLI leaves no orphan holding the ports. Turn it off
    when a short-lived worker thread starts a server that must outlive it.

    admin_key / admin_key_file: with a key (the value, or a file holding it, e.g. a mounted secret), the
    model-repository and model-config APIs answer only requests carrying it in the header
    ernie_deploy.core.admin_key.ADMIN_KEY_HEADER (see args.restricted_args); without one they are open, as
    Triton's are. `ernie-deploy serve` always passes one (see ernie_deploy/server/serve.py).

    grpc_tls: serve gRPC over TLS (mutual TLS when it has a CA). HTTP and metrics stay plain (Triton has no TLS
    for them): http_host binds those two elsewhere than `host`, e.g. gRPC on 0.0.0.0 and HTTP on 127.0.0.1. The
    launcher's own calls (readiness, the stub watchdog) go over HTTP, so they need no client certificate.
    """

    def __init__(
        self,
        model_repository: str | os.PathLike,
        *,
        tritonserver: str | os.PathLike | TritonBinary | None = None,
        host: str = "127.0.0.1",
        http_port: int = PORTS["http"],
        grpc_port: int = PORTS["grpc"],
        metrics_port: int = PORTS["metrics"],
        shm_default_byte_size: int = DEFAULT_SHM_BYTE_SIZE,
        shm_growth_byte_size: int | None = None,
        log_verbose: int = 0,
        log_file: str | os.PathLike | None = None,
        extra_args: Sequence[str] = (),
        shm_preflight: bool = True,
        die_with_parent: bool = True,
        restart_stubs: bool = True,
        on_stub_restart=None,
        admin_key: str | AdminKey | None = None,
        admin_key_file: str | os.PathLike | None = None,
        grpc_tls: ServerTls | None = None,
        http_host: str | None = None,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        load_models: Sequence[str] | None = None,
    ):
        if shm_default_byte_size <= 0:
            raise BadOptionsError(
                f"shm_default_byte_size must be positive, got {shm_default_byte_size}",
                "pass a number of bytes (--shm-default-byte-size), at least 1 MiB",
            )
        if isinstance(admin_key, str):
            admin_key = check_admin_key(admin_key, "the admin_key argument")
        self.admin_key: AdminKey | None = admin_key or (read_admin_key_file(admin_key_file) if admin_key_file else None)
        self.model_repository = Path(model_repository).absolute()
        self._tritonserver = tritonserver
        self.host = host
        self.http_host = http_host or host  # HTTP and metrics
        self.grpc_tls = grpc_tls
        self._wanted_ports = {"http": http_port, "grpc": grpc_port, "metrics": metrics_port}
        self.ports = dict(self._wanted_ports)
        self.shm_default_byte_size = shm_default_byte_size
        self.shm_growth_byte_size = shm_growth_byte_size
        self.cache_bytes = cache_bytes  # the response cache (server/cache.py); 0: none
        self.log_verbose = log_verbose
        self._log_file = Path(log_file).absolute() if log_file else None
        self.extra_args = tuple(extra_args)
        self.shm_preflight = shm_preflight
        self.die_with_parent = die_with_parent
        # The watchdog needs explicit model control; a caller choosing its own mode keeps Triton's behaviour.
        own_mode = any(a.startswith("--model-control-mode") for a in extra_args)
        self.restart_stubs = restart_stubs and not own_mode
        # The entries to load at start, by name (None: all). A caller that leaves models out (the unmade ones:
        # repository.unmade.load_plan) gets explicit model control, which is the only mode that loads a list.
        if load_models is not None and own_mode:
            raise BadOptionsError(
                "a list of models to load needs explicit model control, and extra_args choose another mode",
                "drop --model-control-mode from the extra arguments, or load every model",
            )
        if load_models is not None and not load_models:
            raise BadRepositoryError(
                f"no model in {model_repository} can be loaded: none of them was made",
                "make one: bash scripts/quickstart.sh for the demo models, or scripts/convert.sh --task T --model "
                "NAME --source DIR for a checkpoint of your own",
            )
        self.load_models = tuple(load_models) if load_models is not None else None
        self.on_stub_restart = on_stub_restart
        self.watchdog = None
        self.binary: TritonBinary | None = None
        self._proc: subprocess.Popen | None = None
        self._log_path: Path | None = None
        self._stopped = False
        # Unique per server so that after a SIGKILL its leftover /dev/shm regions can be removed.
        self.shm_prefix = f"ernie_deploy_{uuid.uuid4().hex[:12]}_"
        self.start_seconds: float | None = None
        self.stop_seconds: float | None = None

    # -- addresses ---------------------------------------------------------------------------
    @staticmethod
    def _client_host(host: str) -> str:
        if host in ("", "0.0.0.0"):
            return "127.0.0.1"
        if host == "::":
            return "[::1]"
        return f"[{host}]" if ":" in host else host

    def _bind_host(self, what: str) -> str:
        return self.host if what == "grpc" else self.http_host

    @property
    def grpc_url(self) -> str:
        return f"{self._client_host(self.host)}:{self.ports['grpc']}"

    @property
    def http_url(self) -> str:
        return f"http://{self._client_host(self.http_host)}:{self.ports['http']}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self._client_host(self.http_host)}:{self.ports['metrics']}/metrics"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def log_path(self) -> Path | None:
        return self._log_path

    @property
    def returncode(self) -> int | None:
        return self._proc.poll() if self._proc else None

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def log_text(self) -> str:
        if self._log_path and self._log_path.exists():
            return self._log_path.read_text(errors="replace")
        return ""

    # -- lifecycle ---------------------------------------------------------------------------
    def command(self) -> list[str]:
        """The argv that start() runs (after binary and ports are resolved)."""
        assert self.binary is not None
        growth = self.shm_growth_byte_size or PYTHON_BACKEND_GROWTH_BYTE_SIZE
        args = [
            str(self.binary.path),
            *server_args(
                self.model_repository,
                shm_default_byte_size=self.shm_default_byte_size,
                shm_growth_byte_size=growth,
                cache_bytes=self.cache_bytes,
            ),
            *cache_directory_args(self.binary, self.cache_bytes),
            # What only this launcher needs: the wheel's prepared backends, loopback addresses and
            # chosen ports, a region prefix of its own (so stop() can sweep what a killed server leaks).
            f"--backend-directory={prepared_backend_dir(self.binary)}",
            f"--http-address={self.http_host}",
            f"--http-port={self.ports['http']}",
            f"--grpc-address={self.host}",
            f"--grpc-port={self.ports['grpc']}",
            f"--metrics-address={self.http_host}",
            f"--metrics-port={self.ports['metrics']}",
            "--allow-gpu-metrics=false",
            f"--backend-config=python,shm-region-prefix-name={self.shm_prefix}",
            f"--log-verbose={self.log_verbose}",
        ]
        if self.restart_stubs or self.load_models is not None:
            # Explicit model control, every model loaded at start (as by default) or those named, so the stub
            # watchdog can reload a model whose python stub died (see ernie_deploy.server.watchdog).
            loads = ["*"] if self.load_models is None else self.load_models
            args += ["--model-control-mode=explicit", *(f"--load-model={name}" for name in loads)]
        if self.admin_key is not None:
            args += restricted_args(self.admin_key.value)
        if self.grpc_tls is not None:
            args += grpc_tls_args(self.grpc_tls.cert, self.grpc_tls.key, self.grpc_tls.ca)
        return args + list(self.extra_args)

    def _shown(self, argv: list[str]) -> str:
        """`argv` as the log's first line shows it: the admin key masked (the log is no place for a secret)."""
        text = " ".join(argv)
        return text.replace(self.admin_key.value, "<admin key>") if self.admin_key is not None else text

    def preflight(self) -> None:
        """The checks start() makes before it spawns anything."""
        if not self.model_repository.is_dir():
            raise BadRepositoryError(
                f"model repository {self.model_repository} does not exist",
                "build it first (ernie-deploy build) or pass the right path",
            )
        check_cache(self.model_repository, self.cache_bytes, self.binary)
        if self.shm_preflight:
            check_shm(self.model_repository, self.shm_default_byte_size, self.shm_growth_byte_size)
        for what, port in self.ports.items():
            if port:
                check_port_free(self._bind_host(what), port, what)

    def start(self, timeout: float = 120) -> TritonServer:
        if self.is_running():
            raise BadOptionsError(
                f"tritonserver is already running (pid {self.pid})", "stop() it first, or use the one running"
            )
        t0 = time.monotonic()
        self.binary = (
            self._tritonserver
            if isinstance(self._tritonserver, TritonBinary)
            else find_tritonserver(self._tritonserver)
        )
        self.ports = dict(self._wanted_ports)
        self.preflight()
        picked = iter(free_ports(sum(1 for v in self.ports.values() if not v), self.host))
        self.ports = {k: (v or next(picked)) for k, v in self.ports.items()}
        if len(set(self.ports.values())) != len(self.ports):
            raise BadOptionsError(
                f"the http, grpc and metrics ports must differ, got {self.ports}",
                "give each its own port (--http-port, --grpc-port, --metrics-port; 0 picks a free one)",
            )
        argv = self.command()
        self._log_path = self._log_file or Path(tempfile.mkdtemp(prefix="ernie-deploy-triton-")) / "tritonserver.log"
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self._log_path, "wb") as log:
            log.write(("$ " + self._shown(argv) + "\n").encode())
            log.flush()
            try:
                # its own process group: stop() reaches the model stubs too
                self._proc = start_group(argv, log, server_env(self.binary), die_with_parent=self.die_with_parent)
            except OSError as exc:
                raise ServerNotReadyError(
                    f"cannot run {self.binary.path}: {exc}", "check the file is an executable tritonserver"
                ) from None
        self._stopped = False
        with _LIVE_LOCK:
            _LIVE.add(self)
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.stop(timeout=10)
            raise
        self.start_seconds = time.monotonic() - t0
        if self.restart_stubs:
            self.watchdog = StubWatchdog(
                self._proc.pid,
                self.http_url,
                on_restart=self.on_stub_restart,
                headers=self.admin_key.headers() if self.admin_key is not None else None,
            )
            self.watchdog.start()
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        url = f"{self.http_url}/v2/health/ready"
        wait_http_ok(self._proc, url, timeout, self._fail, name="tritonserver", interval=0.05, max_interval=0.5)
        # Triton starts its metrics endpoint after the HTTP one: a scrape just after ready was refused (seen once in
        # a full test run), so ready includes /metrics answering where it is on.
        if self._metrics_on():
            left = max(1.0, deadline - time.monotonic())
            wait_http_ok(self._proc, self.metrics_url, left, self._fail, name="tritonserver's metrics", interval=0.05)

    def _metrics_on(self) -> bool:
        """Whether Triton serves /metrics: yes, unless the caller's own arguments say --allow-metrics false (the
        last one given counts, as in Triton's parser)."""
        on, args = True, list(self.extra_args)
        for i, arg in enumerate(args):
            name, given, value = arg.partition("=")
            if name == "--allow-metrics":
                value = value if given else (args[i + 1] if i + 1 < len(args) else "true")
                on = value.strip().lower() not in ("false", "0", "no", "off")
        return on

    def check_running(self) -> None:
        """Raise ServerNotReadyError, with the log's errors and the likely fix, if the server has exited."""
        if not self.is_running():
            self._fail(f"tritonserver exited on its own with code {self.returncode}")

    def _fail(self, what: str, timed_out: bool = False) -> None:
        if self._proc.poll() is None:
            self.stop(timeout=10)
        text = self.log_text()
        errors, tail = log_excerpt(text)
        shown = errors or tail
        label = "server errors" if errors else "last log lines"
        body = "\n".join("    " + line for line in shown)
        raise ServerNotReadyError(
            f"{what} (log: {self._log_path})\n  {label}:\n{body}",
            likely_fix(text, self._log_path, timed_out),
        )

    def stop(self, timeout: float = 30) -> int | None:
        """SIGTERM (Triton unloads the models and exits), then SIGKILL to the whole group after `timeout`."""
        proc = self._proc
        if proc is None:
            return None
        if self._stopped:
            return proc.returncode
        if self.watchdog is not None:  # stubs exit during shutdown: that is no death to repair
            self.watchdog.stop()
        t0 = time.monotonic()
        # Model stubs left behind by a crash or a kill: the group outlives its leader only through them.
        # stop_group waits until they are really gone, so a caller that restarts at once finds the ports and shm free.
        stop_group(proc, timeout)
        self._sweep_shm()
        self._stopped = True
        self.stop_seconds = time.monotonic() - t0
        with _LIVE_LOCK:
            _LIVE.discard(self)
        return proc.returncode

    def _sweep_shm(self, shm_path: str = "/dev/shm") -> None:
        try:
            names = os.listdir(shm_path)
        except OSError:
            return
        for name in names:
            if name.startswith(self.shm_prefix):
                try:
                    os.unlink(os.path.join(shm_path, name))
                except OSError:
                    pass

    def __enter__(self) -> TritonServer:
        if not self.is_running():
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"pid {self.pid}" if self.is_running() else "stopped"
        return f"TritonServer({str(self.model_repository)!r}, grpc={self.grpc_url}, {state})"
