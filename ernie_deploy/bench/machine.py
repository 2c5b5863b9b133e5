"""Where a benchmark ran: the machine, its load, the package and server versions, the command, the time."""

from __future__ import annotations

import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info() -> dict:
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    memory = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "memory_gib": memory,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "loadavg_start": loadavg(),
    }


def loadavg() -> list[float] | None:
    """1, 5 and 15 minute load averages: other work on the machine shows here, and skews every row."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def package_versions() -> dict:
    from importlib import metadata

    versions = {}
    for dist in ("onnxruntime", "tritonclient", "nvidia-pytriton", "paddlepaddle", "paddlenlp", "tokenizers", "numpy"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = None
    return versions


def server_version(http_url: str) -> str | None:
    """The server's own version, from GET /v2 (server metadata)."""
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never via a proxy
    try:
        with opener.open(f"{http_url}/v2", timeout=5) as response:
            return json.loads(response.read()).get("version")
    except (OSError, ValueError):
        return None


def self_cpu_seconds() -> float:
    """CPU seconds of this process, every thread, user and system."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def command_line() -> str:
    """The command this process runs, as a shell would take it back."""
    return shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]])


def utc_stamp(seconds: float | None = None) -> str:
    """An ISO 8601 UTC time, to the second (now, by default)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def run_record(rows: list[dict]) -> dict:
    """A measurement's JSON file: when, on what machine, by which command, and its rows."""
    return {"date": utc_stamp(), "machine": machine_info(), "command": command_line(), "rows": rows}
