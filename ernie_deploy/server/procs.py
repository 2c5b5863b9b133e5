"""Read the process table from /proc: the server's process group, its stubs, their CPU time.

The launcher runs tritonserver in its own session, so the server's pid is the group id of the server and
every python-backend stub it starts. Linux only; elsewhere the scans find nothing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class ProcStat:
    pid: int
    comm: str  # cut at 15 characters by the kernel
    state: str  # R, S, D, Z (zombie), X (dead), ...
    ppid: int
    pgrp: int
    cpu_ticks: int  # utime + stime

    @property
    def alive(self) -> bool:
        return self.state not in ("Z", "X")


def processes(proc: str = "/proc") -> Iterator[ProcStat]:
    """Every process readable now; one that exits during the scan is skipped."""
    try:
        entries = os.listdir(proc)
    except OSError:
        return
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"{proc}/{entry}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
            # "pid (comm) state ppid pgrp ...": comm may hold spaces and ')', so split after the last ')'.
            comm = stat[stat.index("(") + 1 : stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2 :].split()
            yield ProcStat(
                int(entry), comm, fields[0], int(fields[1]), int(fields[2]), int(fields[11]) + int(fields[12])
            )
        except (OSError, ValueError, IndexError):
            continue


def group_members(pgid: int, proc: str = "/proc") -> list[int]:
    """Pids of the live (not zombie) processes in process group `pgid`."""
    return [p.pid for p in processes(proc) if p.pgrp == pgid and p.alive]


def group_rss_bytes(pgid: int, proc: str = "/proc") -> int:
    """The resident memory of every live process in group `pgid`, added up (pages two of them share, such as the
    python backend's shared memory, count in each: an upper bound). 0 where none can be read."""
    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for pid in group_members(pgid, proc):
        try:
            with open(f"{proc}/{pid}/statm", "rb") as f:
                total += int(f.read().split()[1]) * page
        except (OSError, ValueError, IndexError):
            continue
    return total


def start_group(argv: list[str], log, env: dict | None = None, *, die_with_parent: bool = True):
    """Start `argv` as the leader of a new process group (a subprocess.Popen), stdout and stderr into the open file
    `log`: everything it starts shares its group, so `stop_group` and `group_cpu_seconds` reach all of it. With
    `die_with_parent`, it gets SIGTERM when the thread that started it dies, so a killed test run or CLI leaves no
    orphan holding ports. OSError (no such executable) is the caller's to word."""
    import subprocess

    return subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
        preexec_fn=_pdeathsig_preexec() if die_with_parent else None,
    )


def _pdeathsig_preexec():
    """A preexec_fn that sets the child's parent-death signal to SIGTERM (Linux prctl; elsewhere nothing). The libc
    function is looked up here, before the fork; the child only calls it."""
    import signal

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


def stop_group(proc, timeout: float) -> int | None:
    """Stop a process started as the leader of its own group (a subprocess.Popen): SIGTERM, `timeout` seconds to
    exit on its own, then SIGKILL to the whole group, so that children left behind by a crash or the kill (Triton's
    model stubs) go too, and wait until all of them are gone. Returns the leader's exit code."""
    import signal
    import subprocess

    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait(timeout=10)
    wait_group_gone(proc.pid, timeout=10)
    return proc.returncode


def wait_group_gone(pgid: int, timeout: float) -> bool:
    """Wait until nothing of group `pgid` is alive. A SIGKILLed process lingers for a moment while the
    kernel tears it down, so "signal sent" is not yet "gone"."""
    deadline = time.monotonic() + timeout
    while group_members(pgid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def group_cpu_seconds(pgid: int | None) -> float | None:
    """CPU seconds of every process in group `pgid` (zombies included: their time was spent); None where
    /proc cannot tell."""
    if not pgid or not os.path.isdir("/proc"):
        return None
    return sum(p.cpu_ticks for p in processes() if p.pgrp == pgid) / os.sysconf("SC_CLK_TCK")


def log_tail(path, lines: int = 12) -> str:
    """The last `lines` lines of a child's log, indented, for an error that names the log ("" when unreadable)."""
    try:
        text = path.read_text(errors="replace") if path else ""
    except OSError:
        text = ""
    return "\n".join("    " + line for line in text.strip().splitlines()[-lines:])


def wait_http_ok(
    proc,
    url: str,
    timeout: float,
    fail,
    *,
    name: str,
    interval: float = 0.1,
    max_interval: float | None = None,
    context=None,
) -> None:
    """Until GET `url` answers 200 from `name`, the child `proc` started (loopback: never through a proxy, so an
    http_proxy in the environment cannot swallow it). `fail(what, timed_out)` raises, naming what went wrong, when the
    child exits first or `timeout` seconds pass. The wait between tries starts at `interval` and grows by half each
    time up to `max_interval` (None: it stays). `context`: the SSL context for an https URL."""
    import urllib.error
    import urllib.request

    handlers = [urllib.request.ProxyHandler({})]
    if context is not None:
        handlers.append(urllib.request.HTTPSHandler(context=context))
    opener = urllib.request.build_opener(*handlers)
    deadline = time.monotonic() + timeout
    delay = interval
    while True:
        code = proc.poll()
        if code is not None:
            fail(f"{name} exited with code {code} before it was ready", False)
        try:
            with opener.open(url, timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            fail(f"{name} was not ready after {timeout:g} s", True)
        time.sleep(delay)
        delay = min(delay * 1.5, max_interval) if max_interval else delay
