"""The `tritonserver` command of the project's environment: Triton's own command line, run by the wheel's server
with what `ernie-deploy serve` sets up, unless a real tritonserver is installed, which then runs as is.

A pip-only machine has a complete tritonserver inside the nvidia-pytriton wheel, but not on PATH and not runnable as
shipped (server/binary.py). The installed `tritonserver` entry point closes that gap:

* where another tritonserver is installed (on PATH after this one, or NVIDIA's container's
  /opt/tritonserver/bin/tritonserver), it replaces itself with that one, arguments untouched: it never shadows a
  real server;
* else it reads Triton's arguments and starts the wheel's server through TritonServer, as `serve` does: the
  backend folder with this Python's stub, the libraries, the python backend's shared memory checked against what the
  repository needs, addresses on 127.0.0.1 unless given, the model-repository and model-config APIs behind an admin
  key, the stub watchdog. Options it cannot honour are refused by name, with what to use instead.

Imports stay cheap until the decision is made: the real server must start as if called directly.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ernie_deploy.core.errors import BadOptionsError
from ernie_deploy.server.binary import is_wheel_binary

NGC_TRITONSERVER = Path("/opt/tritonserver/bin/tritonserver")
# The text pip writes into the entry point's script: a `tritonserver` holding it is this launcher (of this or another
# environment), never a server.
LAUNCHER_MARK = b"ernie_deploy.cli.tritonserver"

# Every option of tritonserver 2.51 (the nvidia-pytriton wheel's build, `tritonserver --help`): True where it takes a
# value. Two take none.
TRITON_OPTIONS: dict[str, bool] = {
    name: True
    for name in (
        "id exit-timeout-secs log-verbose log-info log-warning log-error log-format log-file model-store "
        "model-repository exit-on-error strict-readiness model-control-mode repository-poll-secs load-model "
        "model-config-name model-load-thread-count model-load-retry-count model-namespacing enable-peer-access "
        "allow-http http-address http-port reuse-http-port http-header-forward-pattern http-thread-count "
        "http-restricted-api allow-grpc grpc-address grpc-port reuse-grpc-port grpc-header-forward-pattern "
        "grpc-infer-allocation-pool-size grpc-use-ssl grpc-use-ssl-mutual grpc-server-cert grpc-server-key "
        "grpc-root-cert grpc-infer-response-compression-level grpc-keepalive-time grpc-keepalive-timeout "
        "grpc-keepalive-permit-without-calls grpc-http2-max-pings-without-data "
        "grpc-http2-min-recv-ping-interval-without-data grpc-http2-max-ping-strikes grpc-max-connection-age "
        "grpc-max-connection-age-grace grpc-restricted-protocol allow-sagemaker sagemaker-port "
        "sagemaker-safe-port-range sagemaker-thread-count allow-vertex-ai vertex-ai-port vertex-ai-thread-count "
        "vertex-ai-default-model allow-metrics allow-gpu-metrics allow-cpu-metrics metrics-address metrics-port "
        "metrics-interval-ms metrics-config trace-config backend-directory backend-config repoagent-directory "
        "cache-config cache-directory rate-limit rate-limit-resource pinned-memory-pool-byte-size "
        "cuda-memory-pool-byte-size cuda-virtual-address-size min-supported-compute-capability "
        "buffer-manager-thread-count host-policy model-load-gpu-limit strict-model-config "
        "response-cache-byte-size trace-file trace-level trace-rate trace-count trace-log-frequency"
    ).split()
} | {"help": False, "disable-auto-complete-config": False}

# What the launcher sets itself and cannot hand to the caller: option -> why, and what to do instead.
REFUSED: dict[str, str] = {
    "backend-directory": "the wheel's server runs its own backends with this Python's stub (python only); for other "
    "backends run a full tritonserver (NVIDIA's container), which this command then runs as is",
    "cache-directory": "the wheel's server loads the response cache it ships; --cache-config=local,size=BYTES sizes it",
    "http-restricted-api": "the model-repository and model-config APIs are already restricted to an admin key; give "
    "yours with ERNIE_DEPLOY_ADMIN_KEY or ERNIE_DEPLOY_ADMIN_KEY_FILE (else one is generated for the run)",
    "grpc-restricted-protocol": "the model-repository and model-config APIs are already restricted to an admin key; "
    "give yours with ERNIE_DEPLOY_ADMIN_KEY or ERNIE_DEPLOY_ADMIN_KEY_FILE (else one is generated for the run)",
    "response-cache-byte-size": "Triton deprecated it; use --cache-config=local,size=BYTES",
    "repoagent-directory": "the wheel ships no repository agents",
}


@dataclass
class LaunchRequest:
    """Triton's command line, read into what TritonServer takes; `extra` is handed to tritonserver unchanged."""

    repository: str | None = None
    ports: dict[str, int] = field(default_factory=dict)  # http, grpc, metrics
    addresses: dict[str, str] = field(default_factory=dict)
    log_verbose: int = 0
    log_file: str | None = None
    shm: dict[str, int] = field(default_factory=dict)  # shm_default_byte_size, shm_growth_byte_size
    cache_bytes: int | None = None
    extra: list[str] = field(default_factory=list)
    help: bool = False

    @property
    def grpc_host(self) -> str | None:
        return self.addresses.get("grpc")

    @property
    def http_host(self) -> str | None:
        """HTTP and metrics: TritonServer binds both on one address (parse_triton_args refuses two)."""
        return self.addresses.get("http") or self.addresses.get("metrics")


def _int(name: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise BadOptionsError(f"--{name}={value!r} is not an integer", f"give --{name} a whole number") from None


def _split(argv: list[str]) -> list[tuple[str, str | None]]:
    """(option, value) pairs from `--name=value`, `--name value` and the two value-less flags."""
    pairs, i = [], 0
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("--") or arg == "--":
            raise BadOptionsError(
                f"unexpected argument {arg!r}: tritonserver takes options only",
                "give the repository as --model-repository=PATH (see tritonserver --help)",
            )
        name, eq, value = arg[2:].partition("=")
        if name not in TRITON_OPTIONS:
            raise BadOptionsError(f"tritonserver has no option --{name}", "see tritonserver --help for its options")
        if not TRITON_OPTIONS[name]:
            if eq:
                raise BadOptionsError(f"--{name} takes no value (got {value!r})", f"give it as --{name}")
            pairs.append((name, None))
        elif eq:
            pairs.append((name, value))
        elif i + 1 < len(argv):
            pairs.append((name, argv[i + 1]))
            i += 1
        else:
            raise BadOptionsError(f"--{name} needs a value", f"give it as --{name}=VALUE")
        i += 1
    return pairs


def parse_triton_args(argv: list[str]) -> LaunchRequest:
    """Triton's arguments -> a LaunchRequest; BadOptionsError naming any option this server cannot honour."""
    request = LaunchRequest()
    for name, value in _split(list(argv)):
        if name in REFUSED:
            raise BadOptionsError(f"--{name} is not supported by the pip server", REFUSED[name])
        if name == "help":
            request.help = True
        elif name in ("model-repository", "model-store"):
            if request.repository is not None:
                raise BadOptionsError(
                    "more than one --model-repository: this server serves one repository",
                    "build every model into one repository (ernie-deploy build --model / apply), or run a full "
                    "tritonserver (NVIDIA's container), which takes several",
                )
            request.repository = value
        elif name in ("http-port", "grpc-port", "metrics-port"):
            request.ports[name.split("-")[0]] = _int(name, value)
        elif name in ("http-address", "grpc-address", "metrics-address"):
            request.addresses[name.split("-")[0]] = value
        elif name == "log-verbose":
            request.log_verbose = _int(name, value)
        elif name == "log-file":
            request.log_file = value  # the launcher's log file is the server's: its path is printed at start
        elif name == "allow-http" and value.lower() in ("false", "0", "no", "off"):
            raise BadOptionsError(
                "--allow-http=false is not supported by the pip server: it checks readiness and restarts dead "
                "python stubs over HTTP",
                "keep HTTP on 127.0.0.1 (the default: --http-address) and expose gRPC alone with --grpc-address",
            )
        elif name == "backend-config" and value.startswith("python,"):
            _python_backend_setting(request, value)
        elif name == "cache-config":
            request.cache_bytes = _cache_bytes(value)
        else:
            request.extra.append(f"--{name}" if value is None else f"--{name}={value}")
    if request.repository is None and not request.help:
        raise BadOptionsError(
            "no --model-repository given", "tritonserver --model-repository=models (the folder convert.sh built)"
        )
    http, metrics = request.addresses.get("http"), request.addresses.get("metrics")
    if http and metrics and http != metrics:
        raise BadOptionsError(
            f"--http-address {http} and --metrics-address {metrics} differ: the pip server binds HTTP and metrics on "
            "one address",
            "give them the same address (or leave --metrics-address out)",
        )
    return request


def _python_backend_setting(request: LaunchRequest, value: str) -> None:
    setting, _, number = value.removeprefix("python,").partition("=")
    if setting in ("shm-default-byte-size", "shm-growth-byte-size"):
        request.shm[setting.replace("-", "_")] = _int(f"backend-config=python,{setting}", number)
    elif setting == "shm-region-prefix-name":
        raise BadOptionsError(
            "--backend-config=python,shm-region-prefix-name is not supported by the pip server",
            "leave it out: the server names its shared-memory regions itself, so it can remove what a killed server "
            "leaves in /dev/shm",
        )
    else:
        request.extra.append(f"--backend-config={value}")


def _cache_bytes(value: str) -> int:
    cache, _, setting = value.partition(",")
    key, _, number = setting.partition("=")
    if cache != "local" or key != "size":
        raise BadOptionsError(
            f"--cache-config={value} is not supported by the pip server: it has Triton's local cache only",
            "size it with --cache-config=local,size=BYTES (0: no cache)",
        )
    return _int("cache-config=local,size", number)


def _is_launcher(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return LAUNCHER_MARK in fh.read(4096)
    except OSError:
        return True  # unreadable: not something to hand the command line to


def installed_tritonserver(search_path: str | None = None, ngc: Path = NGC_TRITONSERVER) -> Path | None:
    """A tritonserver that is not this launcher nor the wheel's unprepared binary: the first on PATH, else the NGC
    container's. None where there is none (a pip-only machine)."""

    search = os.environ.get("PATH", "") if search_path is None else search_path
    candidates = [Path(folder or ".") / "tritonserver" for folder in search.split(os.pathsep)] + [ngc]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            if not _is_launcher(candidate) and not is_wheel_binary(candidate):
                return candidate
    return None
