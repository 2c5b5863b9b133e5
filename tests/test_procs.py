"""The /proc reader the launcher, the watchdog and the benchmark share."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from ernie_deploy.server.procs import group_cpu_seconds, group_members, processes, wait_group_gone


def fake_stat(root, pid, comm, state, ppid, pgrp, utime=0, stime=0):
    d = root / str(pid)
    d.mkdir()
    rest = [state, ppid, pgrp] + [0] * 8 + [utime, stime] + [0] * 5
    (d / "stat").write_text(f"{pid} ({comm}) " + " ".join(map(str, rest)) + "\n")


def test_comm_with_spaces_and_parentheses_is_parsed(tmp_path):
    fake_stat(tmp_path, 10, "triton_python_ (x) y", "S", 1, 10, utime=3, stime=4)
    fake_stat(tmp_path, 11, "zombie", "Z", 10, 10)
    (tmp_path / "12").mkdir()  # exited between listdir and open
    (tmp_path / "self").mkdir()
    stats = {p.pid: p for p in processes(str(tmp_path))}
    assert set(stats) == {10, 11}
    assert stats[10].comm == "triton_python_ (x) y" and stats[10].ppid == 1 and stats[10].cpu_ticks == 7
    assert stats[10].alive and not stats[11].alive
    assert group_members(10, str(tmp_path)) == [10]  # the zombie is not counted


def test_a_missing_proc_reads_as_empty(tmp_path):
    assert list(processes(str(tmp_path / "nope"))) == []


def test_a_killed_group_is_waited_for():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        assert group_members(child.pid) == [child.pid]
        assert group_cpu_seconds(child.pid) >= 0
        assert not wait_group_gone(child.pid, timeout=0.1)  # still running: the wait times out
        os.killpg(child.pid, signal.SIGKILL)
        t0 = time.monotonic()
        assert wait_group_gone(child.pid, timeout=10)
        assert time.monotonic() - t0 < 10
    finally:
        child.kill()
        child.wait()
