"""Facts of the machine this process runs on that several stages need (the repository check, the server's
preflight)."""

from __future__ import annotations

import os
import re


def gpu_count() -> int:
    """How many NVIDIA GPUs this machine shows (/dev/nvidia0, /dev/nvidia1, ...); 0 where there are none."""
    try:
        return sum(1 for n in os.listdir("/dev") if re.fullmatch(r"nvidia\d+", n))
    except OSError:
        return 0
