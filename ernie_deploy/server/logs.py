"""Reading the server's log when something goes wrong: the error lines a person needs, without the noise
every CPU-only machine prints, and the likely fix."""

from __future__ import annotations

import re
import sys
from pathlib import Path

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


def _readable(line: str) -> list[str]:
    """A glog line as the lines a person reads: header shortened, quoted message unescaped.

    Triton quotes its messages and escapes newlines, so a Python traceback from a model arrives as
    one long line; importlib's own frames are dropped from it.
    """
    match = _GLOG_LINE.match(line)
    if not match:
        return [line]
    rest = line[match.end() :].split(" ", 2)[-1]  # drop the microseconds-and-thread-id part
    head, sep, message = rest.partition("] ")
    if sep and len(message) >= 2 and message[0] == message[-1] == '"':
        message = message[1:-1].replace("\\n", "\n").replace('\\"', '"')
    out = [f"{line[0]} {head}{sep}{message.splitlines()[0] if message else ''}"]
    out += ["  " + m for m in message.splitlines()[1:] if m.strip() and "<frozen " not in m]
    return out


def log_excerpt(text: str, max_lines: int = 60) -> tuple[list[str], list[str]]:
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


def likely_fix(text: str, log_path: Path, timed_out: bool = False) -> str:
    if "No space left on device" in text or "Unable to initialize shared memory" in text:
        return (
            "/dev/shm is too small for the Python models' shared memory: give the container more "
            "(docker run --shm-size=1g, or shm_size in docker compose) or lower --shm-default-byte-size"
        )
    if "triton_python_backend_stub is not found" in text:
        return (
            "the Python backend stub is missing from --backend-directory; let ernie-deploy prepare it "
            "(do not pass your own)"
        )
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
