"""Finding the `tritonserver` to run, the backends it can load, and making the wheel's server runnable.

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

import hashlib
import os
import shutil
import sys
import sysconfig
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ernie_deploy.core.errors import BadOptionsError, InstallError
from ernie_deploy.core.files import staging_dir
from ernie_deploy.core.paths import cache_dir

WHEEL = "pytriton-wheel"
SYSTEM = "system"
NGC_BACKENDS = Path("/opt/tritonserver/backends")


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


def is_wheel_binary(path: Path) -> bool:
    """Whether `path` is the nvidia-pytriton wheel's tritonserver, which runs only as prepared here."""
    return _wheel_root_of(path) is not None


def _binary_at(path: str, source: str) -> TritonBinary:
    found = shutil.which(path) if os.sep not in path else (path if os.access(path, os.X_OK) else None)
    if not found or not os.path.isfile(found):
        raise BadOptionsError(
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
    raise InstallError(
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
        raise InstallError(
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
    source = binary.backend_dir
    stub = _stub_for_this_python(binary.wheel_root)
    files = sorted(p for p in source.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    key = f"py{sys.version_info.major}{sys.version_info.minor}-{_digest_tree([*files, stub])[:16]}"
    final = cache_dir() / "triton-backends" / key
    if (final / "python" / "triton_python_backend_stub").is_file():
        return final
    with staging_dir(final.parent, key) as tmp:
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
