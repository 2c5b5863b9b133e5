"""Serving a model repository until SIGINT or SIGTERM, with the admin key the listening addresses need: what
`ernie-deploy serve` and the environment's `tritonserver` command (server/launcher.py) run.

The model-repository and model-config APIs are never open. The key comes from a file (`admin_key_file`, e.g. a
mounted secret), else the file named by ERNIE_DEPLOY_ADMIN_KEY_FILE, else ERNIE_DEPLOY_ADMIN_KEY. Without any:
- on a loopback host a random key is generated for the run, written to a private 0600 file whose path is
  printed, and removed when the server stops. Loopback is not private: every local user, and any web page
  in a local browser, can reach it; a browser cannot send the custom header without a CORS preflight,
  which Triton does not grant, so a page cannot unload the models through a restricted server;
- on any other host the server refuses to start: one reachable from other machines gets a key its operator
  chose and can hand to the tools that load and unload models.

gRPC over TLS (`grpc_tls`) leaves Triton's HTTP and metrics endpoints plain, as Triton has no TLS for them:
`http_host` keeps them on another address (127.0.0.1) than `host`, e.g. behind a TLS proxy.

A second process can run beside the server (`gateway`: `ernie-deploy serve --gateway` passes a factory that makes the
HTTP gateway, ernie_deploy.gateway.GatewayProcess, which this layer does not import): started once Triton is ready,
watched as Triton is, and stopped before it, so that the requests it has in flight still reach Triton. If it exits on
its own, everything stops with its log's last lines, as when Triton dies: one process to supervise, restarted whole
by whatever restarts `serve` (systemd, a container runtime), with that supervisor's backoff, rather than a restart
loop here that would hide a gateway that cannot start (a taken port, a bad certificate).
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from ernie_deploy.core.admin_key import (
    ADMIN_KEY_ENV,
    ADMIN_KEY_FILE_ENV,
    ADMIN_KEY_HEADER,
    GENERATE_HINT,
    AdminKey,
    admin_key_from,
    write_new_admin_key,
)
from ernie_deploy.core.endpoints import PORTS
from ernie_deploy.core.errors import BadOptionsError, ServerNotReadyError
from ernie_deploy.core.tls import ServerTls
from ernie_deploy.server.process import TritonServer


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name other than localhost: it may resolve anywhere


def admin_key_for(host: str, key_file: str | None = None, environ=None) -> tuple[AdminKey, Path | None]:
    """The key the server runs with, and the file generated for it (None when the key was configured)."""
    key = admin_key_from(key_file, environ)
    if key is not None:
        return key, None
    if not is_loopback(host):
        raise BadOptionsError(
            f"listening on {host} makes the server reachable from other machines, and no admin key is set for its "
            "model-repository and model-config APIs",
            f'give it a key: export {ADMIN_KEY_ENV}="$({GENERATE_HINT})", or --admin-key-file PATH '
            "(e.g. a mounted secret); callers of those APIs send it in the header " + ADMIN_KEY_HEADER,
        )
    key, path = write_new_admin_key()
    return key, path


def _http_url_option(server_kw: dict) -> str:
    """` --http-url ...` for stats when the HTTP port is not the one it asks by default."""
    port = server_kw.get("http_port", PORTS["http"])
    return "" if port == PORTS["http"] else f" --http-url http://127.0.0.1:{port}"


def serve(
    repository: str,
    *,
    host: str,
    http_host: str,
    admin_key_file: str | None = None,
    grpc_tls: ServerTls | None = None,
    gateway: Callable[[TritonServer], SideProcess] | None = None,
    **server_kw,
) -> None:
    """Serve `repository` until SIGINT/SIGTERM with the admin key this host needs, and `gateway` beside it if given
    (serve_forever). `server_kw` goes to TritonServer."""
    if grpc_tls is not None and not is_loopback(http_host):
        print(
            f"note: gRPC is encrypted; HTTP (port {server_kw.get('http_port', PORTS['http'])}) and metrics (port "
            f"{server_kw.get('metrics_port', PORTS['metrics'])}) on {http_host} are not (Triton has no TLS for them): "
            "--http-host 127.0.0.1 keeps them local, behind a TLS proxy if other machines need them",
            file=sys.stderr,
            flush=True,
        )
    # the key is needed where either address is reachable from other machines
    exposed = host if not is_loopback(host) else http_host
    key, generated = admin_key_for(exposed, admin_key_file)
    if generated is not None:
        print(
            f"admin key: none set ({ADMIN_KEY_ENV}, {ADMIN_KEY_FILE_ENV}, --admin-key-file), so one was generated "
            f"for this run in {generated} (mode 0600, removed on stop).\n"
            f"  Load/unload and model configs need it in the header {ADMIN_KEY_HEADER}; inference does not.\n"
            f"  `ernie-deploy stats{_http_url_option(server_kw)} --admin-key-file {generated}` reads each "
            "ensemble's steps and warm-up with it.",
            file=sys.stderr,
            flush=True,
        )
    else:
        print(f"admin key: from {key.source}", file=sys.stderr, flush=True)
    try:
        serve_forever(
            repository, host=host, http_host=http_host, admin_key=key, grpc_tls=grpc_tls, gateway=gateway, **server_kw
        )
    finally:
        if generated is not None:
            shutil.rmtree(generated.parent, ignore_errors=True)


class SideProcess(Protocol):
    """What serve_forever needs of a process run beside Triton (GatewayProcess is one)."""

    url: str
    pid: int | None
    log_path: Path | None

    def start(self, timeout: float) -> object: ...

    def is_running(self) -> bool: ...

    def log_text(self) -> str: ...

    def stop(self, timeout: float) -> int | None: ...


# The gateway finishes its requests in flight for up to 30 s on SIGTERM (uvicorn's graceful shutdown): a little more
# before the SIGKILL, so a drain that uses its whole time is not cut short.
SIDE_STOP_TIMEOUT = 35


def _side_died(side: SideProcess) -> None:
    code = side.stop(timeout=0)  # already gone: collects its exit code and anything left in its process group
    tail = "\n".join("    " + line for line in side.log_text().strip().splitlines()[-12:])
    raise ServerNotReadyError(
        f"the gateway ({side.url}) exited on its own with code {code}, so tritonserver was stopped too "
        f"(log: {side.log_path})\n  last log lines:\n{tail}",
        "read its log; then start `ernie-deploy serve --gateway` again (a supervisor that restarts `serve` restarts "
        "both), or run the gateway on its own with `ernie-deploy gateway`",
    )


def _report_stub_restart(event) -> None:
    how = f"reloaded in {event.seconds:.1f} s" if event.ok else f"could not be reloaded: {event.message}"
    print(f"the python stub of model {event.model!r} died; {how}", file=sys.stderr, flush=True)


def serve_forever(
    model_repository: str | os.PathLike,
    *,
    start_timeout: float = 120,
    gateway: Callable[[TritonServer], SideProcess] | None = None,
    **kw,
) -> int:
    """Start the server, print where it listens, and block until SIGINT/SIGTERM; then stop cleanly.

    `gateway`, given the ready server, makes the process to run beside it (not yet started): it is started and
    waited for, watched, and stopped first. Other keyword arguments go to TritonServer (as given: no admin key is
    chosen here). Returns 0 after a requested stop; raises ServerNotReadyError if the server or the gateway fails to
    start or dies on its own (the other is stopped then).
    """
    kw.setdefault("on_stub_restart", _report_stub_restart)
    server = TritonServer(model_repository, **kw)
    stop_requested = threading.Event()
    previous: dict[int, object] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda signum, frame: stop_requested.set())
    side: SideProcess | None = None
    try:
        server.start(timeout=start_timeout)
        shown = ""
        if gateway is not None:
            side = gateway(server)
            side.start(timeout=start_timeout)  # returns once its /ready answers 200: Triton and every model
            shown = (
                f"  gateway: {side.url} (pid {side.pid}: SimpleServing POST /models/<model>, Hugging Face POST "
                f"/hf/<model>, readiness /ready)\n"
                f"  gateway log: {side.log_path}\n"
            )
        grpc_tls = f" ({server.grpc_tls.describe()})" if server.grpc_tls is not None else ""
        print(
            f"Triton is ready in {server.start_seconds:.1f} s (pid {server.pid}, {server.binary.kind})\n"
            f"  grpc:    {server.grpc_url}{grpc_tls}\n"
            f"  http:    {server.http_url}\n"
            f"  metrics: {server.metrics_url}\n"
            f"  log:     {server.log_path}\n"
            f"{shown}"
            "Press Ctrl-C to stop.",
            flush=True,
        )
        while not stop_requested.wait(0.5):
            server.check_running()
            if side is not None and not side.is_running():
                _side_died(side)
        if side is not None:  # first: what it has in flight still reaches Triton while it drains
            print("Stopping the gateway ...", flush=True)
            code = side.stop(timeout=SIDE_STOP_TIMEOUT)
            print(f"gateway stopped (exit code {code})", flush=True)
        print("Stopping tritonserver ...", flush=True)
        code = server.stop()
        print(f"tritonserver stopped in {server.stop_seconds:.1f} s (exit code {code})", flush=True)
        return 0
    finally:
        if side is not None:
            side.stop(timeout=SIDE_STOP_TIMEOUT)
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
