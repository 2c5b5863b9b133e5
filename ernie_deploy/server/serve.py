"""Run a real `tritonserver` process on a model repository: find it, start it, wait for it, stop it.

Two ways to get a server binary are supported:

* ``pytriton-wheel``: the pip wheel ``nvidia-pytriton`` ships a complete tritonserver with the
  Python backend. It is not runnable as shipped; three things make it so, all done here:
  the Python backend stub built for *this* Python is copied into a cached copy of the backend
  folder, the interpreter's ``bin/`` goes first on PATH (so the models see this environment's
  packages), and LD_LIBRARY_PATH gets the wheel's bundled libraries and this Python's libpython.
* ``system``: a ``tritonserver`` that is already installed, as in NVIDIA's NGC container, with its
  backends in ``/opt/tritonserver/backends``.

Imports stay cheap: nothing here imports paddle or tritonclient at module load.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.server.procs import wait_group_gone

MiB = 1 << 20

# Each Python-backend model instance gets one shared-memory region of this size in /dev/shm,
# allocated in full when the instance starts (measured: the files are fully backed at once).
# The backend's own default is 1 MiB, which makes the region grow in 1 MiB steps on the first
# batches of ERNIE traffic (64 sequences x 128 tokens x two INT64 inputs is already 128 KiB per
# tensor set, and a token-classification logits tensor 64 x 128 x labels x FP32 several hundred
# KiB, plus the copies in flight). 4 MiB holds such a batch without growing, and ten instances
# (40 MiB) still fit Docker's default 64 MiB /dev/shm.
DEFAULT_SHM_BYTE_SIZE = 4 * MiB
# The Python backend's default growth step; counted once per instance as headroom.
PYTHON_BACKEND_GROWTH_BYTE_SIZE = 1 * MiB

WHEEL = "pytriton-wheel"
SYSTEM = "system"
NGC_BACKENDS = Path("/opt/tritonserver/backends")

# Log lines that a CPU-only machine always prints and that never explain a failure.
_HARMLESS = (
    "pinned memory",
    "CudaDriverHelper",
    "CUDA driver version is insufficient",
    "Failed to initialize NVML",
    "DCGM",
    "unable to create stream",
    "GPU metrics",
)
_GLOG_LINE = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d")


# --------------------------------------------------------------------------------------------
# Finding the binary


@dataclass(frozen=True)
class TritonBinary:
    path: Path  # the tritonserver executable
    backend_dir: Path  # where its backends live (for the wheel: the shipped folder, stub-less)
    kind: str  # "pytriton-wheel" or "system"

    @property
    def wheel_root(self) -> Path:
        """`.../site-packages/pytriton/tritonserver` for the wheel kind."""
        return self.path.parent.parent


def _wheel_root_of(path: Path) -> Path | None:
    root = path.resolve().parent.parent
    if (root / "python_backend_stubs").is_dir() and (root / "backends").is_dir():
        return root
    return None


def _binary_at(path: str, source: str) -> TritonBinary:
    found = shutil.which(path) if os.sep not in path else (path if os.access(path, os.X_OK) else None)
    if not found or not os.path.isfile(found):
        raise ErnieDeployError(
            f"tritonserver not found at {path!r} (from {source})",
            "point --tritonserver / TRITONSERVER at an executable tritonserver, or unset it to use the "
            "one in the nvidia-pytriton wheel (pip install nvidia-pytriton)",
        )
    exe = Path(found).absolute()
    root = _wheel_root_of(exe)
    if root is not None:
        return TritonBinary(exe, root / "backends", WHEEL)
    return TritonBinary(exe, _system_backend_dir(exe), SYSTEM)


def _system_backend_dir(exe: Path) -> Path:
    beside = exe.resolve().parent.parent / "backends"
    if beside.is_dir():
        return beside
    return NGC_BACKENDS


def _wheel_binary() -> TritonBinary | None:
    import importlib.util

    try:
        spec = importlib.util.find_spec("pytriton")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        root = Path(location) / "tritonserver"
        exe = root / "bin" / "tritonserver"
        if exe.is_file() and (root / "backends").is_dir():
            return TritonBinary(exe, root / "backends", WHEEL)
    return None


def find_tritonserver(explicit: str | os.PathLike | None = None) -> TritonBinary:
    """The server to run: `explicit` > env TRITONSERVER > the nvidia-pytriton wheel > PATH."""
    if explicit:
        return _binary_at(os.fspath(explicit), "--tritonserver")
    env = os.environ.get("TRITONSERVER")
    if env:
        return _binary_at(env, "the TRITONSERVER environment variable")
    wheel = _wheel_binary()
    if wheel is not None:
        return wheel
    on_path = shutil.which("tritonserver")
    if on_path:
        return _binary_at(on_path, "PATH")
    raise ErnieDeployError(
        "no tritonserver found: nvidia-pytriton is not installed and there is no tritonserver on PATH",
        "pip install nvidia-pytriton (it ships a tritonserver with the Python backend), run inside "
        "NVIDIA's tritonserver container, or pass --tritonserver PATH / set TRITONSERVER=PATH",
    )


def available_backends(binary: TritonBinary) -> set[str]:
    """Names of the backends the server can load, e.g. {"python"} for the wheel."""
    try:
        entries = list(binary.backend_dir.iterdir())
    except OSError:
        return set()
    return {e.name for e in entries if e.is_dir() and not e.name.startswith((".", "_"))}


# --------------------------------------------------------------------------------------------
# Making the wheel's server runnable


def _stub_for_this_python(root: Path) -> Path:
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = root / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.is_file():
        have = sorted(p.name for p in (root / "python_backend_stubs").iterdir() if p.is_dir())
        raise ErnieDeployError(
            f"nvidia-pytriton has no Python backend stub for Python {version} (it has {', '.join(have)})",
            "run ernie-deploy with one of those Python versions, or use NVIDIA's tritonserver container",
        )
    return stub


def _digest_tree(paths: Iterable[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(str(path.name).encode() + b"\0")
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def prepared_backend_dir(binary: TritonBinary) -> Path:
    """The folder to pass as --backend-directory.

    For the wheel: a copy of its backends with this Python's stub added, in the cache, keyed by
    content, created once and atomically (a rename), so concurrent first runs never see half a copy.
    """
    if binary.kind != WHEEL:
        return binary.backend_dir
    from ernie_deploy.core.layout import cache_dir

    source = binary.backend_dir
    stub = _stub_for_this_python(binary.wheel_root)
    files = sorted(p for p in source.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    key = f"py{sys.version_info.major}{sys.version_info.minor}-{_digest_tree([*files, stub])[:16]}"
    final = cache_dir() / "triton-backends" / key
    if (final / "python" / "triton_python_backend_stub").is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=final.parent))
    try:
        shutil.copytree(source, tmp, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
        target = tmp / "python" / "triton_python_backend_stub"
        shutil.copy2(stub, target)
        os.chmod(target, 0o755)
        try:
            os.rename(tmp, final)
        except OSError:
            # Another process won the race (final is a non-empty directory now): use theirs.
            if not (final / "python" / "triton_python_backend_stub").is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def server_env(binary: TritonBinary, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment the server runs in (see the module docstring for why)."""
    env = dict(os.environ if base is None else base)
    # The Python models run in an interpreter that finds its packages through the `python` on PATH.
    bindir = os.path.dirname(sys.executable)
    env["PATH"] = os.pathsep.join(p for p in (bindir, env.get("PATH", "")) if p)
    if binary.kind == WHEEL:
        libs = [str(binary.wheel_root.parent.parent / "nvidia_pytriton.libs")]
        libpython = _libpython_dir()
        if libpython:
            libs.append(libpython)
        old = env.get("LD_LIBRARY_PATH")
        env["LD_LIBRARY_PATH"] = os.pathsep.join(libs + ([old] if old else []))
    return env


def _libpython_dir() -> str | None:
    """The folder with this Python's libpython3.X.so.1.0, which the stub links against."""
    names = [sysconfig.get_config_var(v) for v in ("INSTSONAME", "LDLIBRARY")]
    libdir = sysconfig.get_config_var("LIBDIR")
    multiarch = sysconfig.get_config_var("MULTIARCH")
    candidates = [libdir, os.path.join(libdir, multiarch) if libdir and multiarch else None]
    for folder in candidates:
        for name in names:
            if folder and name and os.path.isfile(os.path.join(folder, name)):
                return folder
    return None


# --------------------------------------------------------------------------------------------
# Preflight: shared memory and ports


def _gpu_count() -> int:
    try:
        return sum(1 for n in os.listdir("/dev") if re.fullmatch(r"nvidia\d+", n))
    except OSError:
        return 0


def python_instance_count(model_repository: str | os.PathLike, gpus: int | None = None) -> int:
    """How many Python-backend model instances the server will start for this repository.

    `gpus`: the GPUs the server will see (default: this machine's); it matters only for models
    without a KIND_CPU instance group.
    """
    gpus = _gpu_count() if gpus is None else gpus
    total = 0
    for config in sorted(Path(model_repository).glob("*/config.pbtxt")):
        text = config.read_text(errors="replace")
        if not re.search(r"""\bbackend\s*:\s*["']python["']""", text):
            continue
        total += _instances_in(text, gpus)
    return total


def _instances_in(text: str, gpus: int) -> int:
    try:
        from google.protobuf import text_format
        from tritonclient.grpc import model_config_pb2

        config = text_format.Parse(text, model_config_pb2.ModelConfig())
    except Exception:  # unparseable or no tritonclient: the server will say what is wrong
        return max(1, gpus)
    if not config.instance_group:
        return max(1, gpus)
    count = 0
    for group in config.instance_group:
        n = group.count or 1
        if group.kind == model_config_pb2.ModelInstanceGroup.KIND_CPU or (
            group.kind == model_config_pb2.ModelInstanceGroup.KIND_AUTO and gpus == 0
        ):
            count += n
        else:
            count += n * (len(group.gpus) or max(1, gpus))
    return count


def shm_needed(
    model_repository: str | os.PathLike,
    shm_default_byte_size: int = DEFAULT_SHM_BYTE_SIZE,
    shm_growth_byte_size: int | None = None,
    gpus: int | None = None,
) -> int:
    """Bytes of /dev/shm the repository's Python-backend instances need: one region each, plus one growth step."""
    growth = shm_growth_byte_size or PYTHON_BACKEND_GROWTH_BYTE_SIZE
    return python_instance_count(model_repository, gpus) * (shm_default_byte_size + growth)


def shm_size_for(need: int) -> int:
    """The /dev/shm size to give a container that needs `need` bytes: twice the need (regions grow
    under load beyond the one step counted), rounded up to 64 MiB, and never under 256 MiB."""
    return max(256 * MiB, -(-2 * need // (64 * MiB)) * 64 * MiB)


def check_shm(
    model_repository: str | os.PathLike,
    shm_default_byte_size: int = DEFAULT_SHM_BYTE_SIZE,
    shm_growth_byte_size: int | None = None,
    shm_path: str = "/dev/shm",
) -> int:
    """Fail early, with the fix, when /dev/shm cannot hold the Python models' regions.

    Returns the bytes needed (0 when the repository has no Python models).
    """
    instances = python_instance_count(model_repository)
    if instances == 0:
        return 0
    growth = shm_growth_byte_size or PYTHON_BACKEND_GROWTH_BYTE_SIZE
    need = instances * (shm_default_byte_size + growth)
    try:
        st = os.statvfs(shm_path)
    except OSError:
        return need  # no /dev/shm to measure: let the server report what it finds
    free = st.f_bavail * st.f_frsize
    if free >= need:
        return need
    suggest = shm_size_for(need) // MiB
    suggest_s = f"{suggest}m" if suggest < 1024 or suggest % 1024 else f"{suggest // 1024}g"
    raise ErnieDeployError(
        f"{shm_path} has {_human(free)} free, but the {instances} Python-backend model instance(s) in "
        f"{model_repository} need about {_human(need)}: each gets a {_human(shm_default_byte_size)} "
        f"shared-memory region plus {_human(growth)} to grow "
        "(too little makes them fail with 'No space left on device')",
        f"give the container more shared memory (docker run --shm-size={suggest_s}, or shm_size: {suggest_s} "
        "in docker compose), or lower the per-instance region (--shm-default-byte-size, "
        f"now {shm_default_byte_size} bytes; at least {MiB}) or the instance counts in config.pbtxt",
    )


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` distinct ports nothing listens on right now (the OS picks them)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sockets = [socket.socket(family, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for s in sockets:  # all held open at once, so the OS cannot hand out one port twice
            s.bind((host or "0.0.0.0", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _check_port_free(host: str, port: int, what: str) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            raise ErnieDeployError(
                f"cannot use {host}:{port} for the {what} endpoint: {exc.strerror} "
                "(another tritonserver still running?)",
                f"stop whatever listens there, or pick another port (--{what}-port N, or 0 for a free one)",
            ) from None


# --------------------------------------------------------------------------------------------
# Reading the log when something goes wrong


def _readable(line: str) -> list[str]:
    """A glog line as the lines a person reads: header shortened, quoted message unescaped.

    Triton quotes its messages and escapes newlines, so a Python traceback from a model arrives as
    one long line; importlib's own frames are dropped from it.
    """
    match = _GLOG_LINE.match(line)
    if not match:
        return [line]
    rest = line[match.end():].split(" ", 2)[-1]  # drop the microseconds-and-thread-id part
    head, sep, message = rest.partition("] ")
    if sep and len(message) >= 2 and message[0] == message[-1] == '"':
        message = message[1:-1].replace("\\n", "\n").replace('\\"', '"')
    out = [f"{line[0]} {head}{sep}{message.splitlines()[0] if message else ''}"]
    out += ["  " + m for m in message.splitlines()[1:] if m.strip() and "<frozen " not in m]
    return out


def _log_excerpt(text: str, max_lines: int = 60) -> tuple[list[str], list[str]]:
    """(error lines with their continuation lines, last lines) with the table art and noise dropped."""
    errors: list[str] = []
    in_error = False
    kept: list[str] = []
    for line in text.splitlines():
        if not line.strip() or line.startswith(("+-", "| ")):
            in_error = False
            continue
        if any(h in line for h in _HARMLESS):
            in_error = False
            continue
        kept.append(line)
        if (line[:1] == "E" and _GLOG_LINE.match(line)) or line.startswith(("error:", "Error:")):
            in_error = True
            errors.extend(_readable(line))
        elif _GLOG_LINE.match(line):
            in_error = False
        elif in_error:
            errors.append(line)
    return errors[:max_lines], [r for line in kept[-15:] for r in _readable(line)]


def _human(n: float) -> str:
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", MiB)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n / MiB:.2f} MiB"


def _likely_fix(text: str, log_path: Path, timed_out: bool = False) -> str:
    if "No space left on device" in text or "Unable to initialize shared memory" in text:
        return (
            "/dev/shm is too small for the Python models' shared memory: give the container more "
            "(docker run --shm-size=1g, or shm_size in docker compose) or lower --shm-default-byte-size"
        )
    if "triton_python_backend_stub is not found" in text:
        return "the Python backend stub is missing from --backend-directory; let ernie-deploy prepare it (do not pass your own)"
    if "No module named" in text:
        return (
            f"install the missing package into the Python that serves the models ({sys.executable}); "
            "its bin/ folder is first on the server's PATH"
        )
    if "error while loading shared libraries" in text or "cannot open shared object" in text:
        return "a shared library is missing: for the wheel, reinstall nvidia-pytriton; check LD_LIBRARY_PATH"
    if "already in use" in text or "Address already in use" in text:
        return "a port is taken: stop the other server or pick free ports (0 picks one)"
    if "failed to load" in text:
        return f"fix the model named above (its config.pbtxt or model.py); full log: {log_path}"
    if timed_out:
        return f"models that load slowly need a longer start timeout; what it was doing is in {log_path}"
    return f"read the full server log: {log_path}"


# --------------------------------------------------------------------------------------------
# The server


def server_args(
    model_repository: str | os.PathLike,
    *,
    shm_default_byte_size: int = DEFAULT_SHM_BYTE_SIZE,
    shm_growth_byte_size: int = PYTHON_BACKEND_GROWTH_BYTE_SIZE,
) -> list[str]:
    """The tritonserver arguments every deployment of a repository shares (no binary, ports or addresses).

    The one source for them: TritonServer.command() starts with these, the image's CMD
    (docker/Dockerfile) and the Kubernetes Deployment (`ernie-deploy manifests`) are these for
    /models, and tests/test_deploy.py checks that they stay equal.
    """
    return [
        f"--model-repository={model_repository}",
        # A model that fails to load makes the server exit (a launcher reports why, a container
        # restarts) instead of serving the rest; strict readiness keeps /v2/health/ready false
        # until every model is loaded.
        "--exit-on-error=true",
        "--strict-readiness=true",
        # The generated config.pbtxt files are complete and checked; the server must not amend them.
        "--disable-auto-complete-config",
        # Python-backend shared memory: a region per instance, grown in steps (see DEFAULT_SHM_BYTE_SIZE).
        f"--backend-config=python,shm-default-byte-size={shm_default_byte_size}",
        f"--backend-config=python,shm-growth-byte-size={shm_growth_byte_size}",
    ]


_LIVE: set["TritonServer"] = set()
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


def _pdeathsig_preexec():
    """A preexec_fn that makes the server get SIGTERM when the thread that started it dies.

    Keeps a killed test run or CLI from leaving an orphan server holding the ports. The libc
    function is looked up here, before the fork; the child only calls it.
    """
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent is already gone
            os._exit(1)

    return preexec


class TritonServer:
    """A tritonserver process on a model repository, bound to `host` (loopback by default).

    Ports of 0 are replaced by free ports at start(). Use as a context manager, or call start() and
    stop(). Output goes to `log_file` (default: a fresh temporary folder, kept for reading).

    die_with_parent: the server gets SIGTERM when the thread that called start() ends (Linux
    PR_SET_PDEATHSIG), so a killed test run or CLI leaves no orphan holding the ports. Turn it off
    when a short-lived worker thread starts a server that must outlive it.
    """

    def __init__(
        self,
        model_repository: str | os.PathLike,
        *,
        tritonserver: str | os.PathLike | TritonBinary | None = None,
        host: str = "127.0.0.1",
        http_port: int = 8000,
        grpc_port: int = 8001,
        metrics_port: int = 8002,
        shm_default_byte_size: int = DEFAULT_SHM_BYTE_SIZE,
        shm_growth_byte_size: int | None = None,
        log_verbose: int = 0,
        log_file: str | os.PathLike | None = None,
        extra_args: Sequence[str] = (),
        shm_preflight: bool = True,
        die_with_parent: bool = True,
        restart_stubs: bool = True,
        on_stub_restart=None,
    ):
        if shm_default_byte_size <= 0:
            raise ErnieDeployError(f"shm_default_byte_size must be positive, got {shm_default_byte_size}")
        self.model_repository = Path(model_repository).absolute()
        self._tritonserver = tritonserver
        self.host = host
        self._wanted_ports = {"http": http_port, "grpc": grpc_port, "metrics": metrics_port}
        self.ports = dict(self._wanted_ports)
        self.shm_default_byte_size = shm_default_byte_size
        self.shm_growth_byte_size = shm_growth_byte_size
        self.log_verbose = log_verbose
        self._log_file = Path(log_file).absolute() if log_file else None
        self.extra_args = tuple(extra_args)
        self.shm_preflight = shm_preflight
        self.die_with_parent = die_with_parent
        # The watchdog needs explicit model control; a caller choosing its own mode keeps Triton's behaviour.
        self.restart_stubs = restart_stubs and not any(a.startswith("--model-control-mode") for a in extra_args)
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
    @property
    def _client_host(self) -> str:
        if self.host in ("", "0.0.0.0"):
            return "127.0.0.1"
        if self.host == "::":
            return "[::1]"
        return f"[{self.host}]" if ":" in self.host else self.host

    @property
    def grpc_url(self) -> str:
        return f"{self._client_host}:{self.ports['grpc']}"

    @property
    def http_url(self) -> str:
        return f"http://{self._client_host}:{self.ports['http']}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self._client_host}:{self.ports['metrics']}/metrics"

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
            *server_args(self.model_repository, shm_default_byte_size=self.shm_default_byte_size,
                         shm_growth_byte_size=growth),
            # What only this launcher needs: the wheel's prepared backends, loopback addresses and
            # chosen ports, a region prefix of its own (so stop() can sweep what a killed server leaks).
            f"--backend-directory={prepared_backend_dir(self.binary)}",
            f"--http-address={self.host}",
            f"--http-port={self.ports['http']}",
            f"--grpc-address={self.host}",
            f"--grpc-port={self.ports['grpc']}",
            f"--metrics-address={self.host}",
            f"--metrics-port={self.ports['metrics']}",
            "--allow-gpu-metrics=false",
            f"--backend-config=python,shm-region-prefix-name={self.shm_prefix}",
            f"--log-verbose={self.log_verbose}",
        ]
        if self.restart_stubs:
            # Explicit model control, every model loaded at start (as by default), so the stub watchdog
            # can reload a model whose python stub died (see ernie_deploy.server.watchdog).
            args += ["--model-control-mode=explicit", "--load-model=*"]
        return args + list(self.extra_args)

    def preflight(self) -> None:
        """The checks start() makes before it spawns anything."""
        if not self.model_repository.is_dir():
            raise ErnieDeployError(
                f"model repository {self.model_repository} does not exist",
                "build it first (ernie-deploy build) or pass the right path",
            )
        if self.shm_preflight:
            check_shm(self.model_repository, self.shm_default_byte_size, self.shm_growth_byte_size)
        for what, port in self.ports.items():
            if port:
                _check_port_free(self.host, port, what)

    def start(self, timeout: float = 120) -> "TritonServer":
        if self.is_running():
            raise ErnieDeployError(f"tritonserver is already running (pid {self.pid})")
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
            raise ErnieDeployError(f"the http, grpc and metrics ports must differ, got {self.ports}")
        argv = self.command()
        self._log_path = self._log_file or Path(tempfile.mkdtemp(prefix="ernie-deploy-triton-")) / "tritonserver.log"
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self._log_path, "wb") as log:
            log.write(("$ " + " ".join(argv) + "\n").encode())
            log.flush()
            try:
                self._proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=server_env(self.binary),
                    start_new_session=True,  # its own process group: stop() reaches the model stubs too
                    preexec_fn=_pdeathsig_preexec() if self.die_with_parent else None,
                )
            except OSError as exc:
                raise ErnieDeployError(
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
            from ernie_deploy.server.watchdog import StubWatchdog

            self.watchdog = StubWatchdog(self._proc.pid, self.grpc_url, on_restart=self.on_stub_restart)
            self.watchdog.start()
        return self

    def _wait_ready(self, timeout: float) -> None:
        import urllib.error
        import urllib.request

        # No proxy: an http_proxy in the environment must not swallow a loopback health check.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        url = f"{self.http_url}/v2/health/ready"
        deadline = time.monotonic() + timeout
        delay = 0.05
        while True:
            code = self._proc.poll()
            if code is not None:
                self._fail(f"tritonserver exited with code {code} before it was ready")
            try:
                with opener.open(url, timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                self._fail(f"tritonserver was not ready after {timeout:g} s", timed_out=True)
            time.sleep(delay)
            delay = min(delay * 1.5, 0.5)

    def _fail(self, what: str, timed_out: bool = False) -> None:
        if self._proc.poll() is None:
            self.stop(timeout=10)
        text = self.log_text()
        errors, tail = _log_excerpt(text)
        shown = errors or tail
        label = "server errors" if errors else "last log lines"
        body = "\n".join("    " + line for line in shown)
        raise ErnieDeployError(
            f"{what} (log: {self._log_path})\n  {label}:\n{body}",
            _likely_fix(text, self._log_path, timed_out),
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
        if proc.poll() is None:
            try:
                proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._killpg(signal.SIGKILL)
                proc.wait(timeout=10)
        # Model stubs left behind by a crash or a kill: the group outlives its leader only through them.
        # Wait until they are really gone, so a caller that restarts at once finds the ports and shm free.
        self._killpg(signal.SIGKILL)
        wait_group_gone(proc.pid, timeout=10)
        self._sweep_shm()
        self._stopped = True
        self.stop_seconds = time.monotonic() - t0
        with _LIVE_LOCK:
            _LIVE.discard(self)
        return proc.returncode

    def _killpg(self, sig: int) -> None:
        try:
            os.killpg(self._proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

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

    def __enter__(self) -> "TritonServer":
        if not self.is_running():
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"pid {self.pid}" if self.is_running() else "stopped"
        return f"TritonServer({str(self.model_repository)!r}, grpc={self.grpc_url}, {state})"


# --------------------------------------------------------------------------------------------
# Blocking entry point for the CLI


def _report_stub_restart(event) -> None:
    how = f"reloaded in {event.seconds:.1f} s" if event.ok else f"could not be reloaded: {event.message}"
    print(f"the python stub of model {event.model!r} died; {how}", file=sys.stderr, flush=True)


def serve_forever(model_repository: str | os.PathLike, *, start_timeout: float = 120, **kw) -> int:
    """Start the server, print where it listens, and block until SIGINT/SIGTERM; then stop cleanly.

    Keyword arguments go to TritonServer. Returns 0 after a requested stop; raises ErnieDeployError
    if the server fails to start or dies on its own.
    """
    kw.setdefault("on_stub_restart", _report_stub_restart)
    server = TritonServer(model_repository, **kw)
    stop_requested = threading.Event()
    previous: dict[int, object] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda signum, frame: stop_requested.set())
    try:
        server.start(timeout=start_timeout)
        print(
            f"Triton is ready in {server.start_seconds:.1f} s (pid {server.pid}, {server.binary.kind})\n"
            f"  grpc:    {server.grpc_url}\n"
            f"  http:    {server.http_url}\n"
            f"  metrics: {server.metrics_url}\n"
            f"  log:     {server.log_path}\n"
            "Press Ctrl-C to stop.",
            flush=True,
        )
        while not stop_requested.wait(0.5):
            if not server.is_running():
                server._fail(f"tritonserver exited on its own with code {server.returncode}")
        print("Stopping tritonserver ...", flush=True)
        code = server.stop()
        print(f"tritonserver stopped in {server.stop_seconds:.1f} s (exit code {code})", flush=True)
        return 0
    finally:
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
