"""The checks made before a server is spawned: how many Python-backend instances a repository starts, the
shared memory they need and whether /dev/shm holds it, and the ports.

Imports stay cheap: tritonclient is imported only to parse a config, when one is counted.
"""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

from ernie_deploy.core.errors import ServerNotReadyError
from ernie_deploy.core.host import gpu_count

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


def python_instance_count(model_repository: str | os.PathLike, gpus: int | None = None) -> int:
    """How many Python-backend model instances the server will start for this repository.

    `gpus`: the GPUs the server will see (default: this machine's); it matters only for models
    without a KIND_CPU instance group.
    """
    gpus = gpu_count() if gpus is None else gpus
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
    raise ServerNotReadyError(
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


def check_port_free(host: str, port: int, what: str) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            raise ServerNotReadyError(
                f"cannot use {host}:{port} for the {what} endpoint: {exc.strerror} "
                "(another tritonserver still running?)",
                f"stop whatever listens there, or pick another port (--{what}-port N, or 0 for a free one)",
            ) from None


def _human(n: float) -> str:
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", MiB)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n / MiB:.2f} MiB"
