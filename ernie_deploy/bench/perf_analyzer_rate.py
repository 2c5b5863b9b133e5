"""perf_analyzer offering a fixed request rate, whatever the answers (an open loop, `--request-rate-range`): its
command, what it prints of itself, and one run bounded in memory and time (perf_analyzer 2.41, offered more than it
keeps up with, grows until it is stopped). The closed-loop cells are in bench/perf_analyzer.py."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from ernie_deploy.bench.load import REFUSALS
from ernie_deploy.bench.perf_analyzer import base_command, parse_perf_analyzer_csv, time_windows
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.core.tls import Tls
from ernie_deploy.server.procs import group_rss_bytes, start_group, stop_group

# Past capacity the queue, and so the latency, grows from one window to the next by more than 999% allows (measured:
# the demo classifier without a queue bound at 1x of a capacity measured on a busy host exited 2, "Failed to obtain
# stable measurement"); a bound this loose takes the 3 windows whatever they are (measured at 2x: exit 0).
RATE_STABILITY_PERCENT = 1_000_000


def perf_analyzer_rate_command(
    binary: str,
    model: str,
    url: str,
    input_file: str | Path,
    csv_file: str | Path,
    rate: float,
    duration_s: float = 10.0,
    tls: Tls | None = None,
) -> list[str]:
    """One perf_analyzer run offering `rate` requests a second on a fixed schedule, whatever the answers (an open
    loop), over gRPC, one text per request, measured over `duration_s` (3 windows of a third each).

    Asynchronous calls: in its default synchronous mode each of its threads waits for its answer, so at most
    --max-threads (4 in rate mode) requests are ever in flight and an overload turns into a closed loop of 4
    (measured, unbounded queue, 1,200/s asked: it sent 585/s, 99.8% of the requests late, p99 12 ms; with -a it
    sent 1,200/s and the answered p99 grew to 2.7 s as the queue did)."""
    load = ["-a", f"--request-rate-range={rate:.2f}:{rate:.2f}", "--request-distribution=constant"]
    window = time_windows(duration_s)
    return base_command(binary, model, url, input_file, csv_file, 1, load, window, tls, RATE_STABILITY_PERCENT)


def parse_delayed_share(stdout: str) -> float:
    """The share of requests a rate run sent later than their schedule (perf_analyzer prints it only when some
    were: "... 11.53% of the requests were delayed")."""
    import re

    match = re.search(r"([\d.]+)% of the requests were delayed", stdout)
    return float(match.group(1)) / 100 if match else 0.0


@dataclass
class RateRun:
    """What one perf_analyzer rate run said of itself; the server's statistics say what was answered and refused."""

    returncode: int
    seconds: float  # wall time of the process
    throughput: float | None = None  # answered per second over its windows
    p50_ms: float | None = None  # of the answered requests
    p99_ms: float | None = None
    delayed_share: float = 0.0  # sent later than the schedule: the load generator could not keep up
    # perf_analyzer 2.41 stops at the first failed request, a refusal included: a worker thread whose request
    # failed stops sending, and the run ends after that window with exit 99 and no CSV (measured: --max-queue-size
    # 1 and --queue-timeout-us 20000 at 2,000/s, both modes; its source has no option to go on).
    refused: bool = False
    message: str = ""  # its last lines, when it failed
    outran: str = ""  # why it was stopped past a bound (RATE_MAX_RSS_BYTES, rate_time_limit_s), "" if it was not


# Offered more than it and the server keep up with, perf_analyzer 2.41 does not end: each window waits for its own
# answers while it goes on sending, and what it holds for the requests in flight grows without bound (measured on a
# 2-core host, the tiny test classifier, capacity 1,532/s, 0.9 s asked: at 4x it ran 2 s and held 125 MiB; at 8x
# 44 s and 1.8 GiB; at 16x 68 s and 23.9 GiB, when the kernel's OOM killer ended it, exit -9). So a rate run is
# stopped past either bound, and the cell is measured by the Python generator, whose cost is its rate times its
# duration. Its own start holds about 110 MiB (the CUDA runtime it links), a run it keeps up with little more.
RATE_MAX_RSS_BYTES = 512 * 2**20


def rate_time_limit_s(duration_s: float) -> float:
    """How long a rate run may take: its windows take `duration_s`, draining the queue it leaves a few times that
    (measured: 4x of capacity over 0.9 s took 6.9 s on a busy host)."""
    return max(60.0, 10 * duration_s)


def _run_bounded(argv: list[str], log_path: Path, max_rss_bytes: int, time_limit_s: float) -> tuple[int, str, str]:
    """Run `argv` in its own process group, its output into `log_path`, and stop the group (SIGTERM, then SIGKILL)
    once it holds more than `max_rss_bytes` or has run `time_limit_s`. Returns (exit code, what it printed, why it
    was stopped: "" when it ended on its own)."""

    why = ""
    with open(log_path, "wb") as log:
        proc = start_group(argv, log)
        t0 = time.monotonic()
        while proc.poll() is None:
            held, ran = group_rss_bytes(proc.pid), time.monotonic() - t0
            if held > max_rss_bytes:
                mib = max_rss_bytes / 2**20
                why = f"it held {held / 2**20:.0f} MiB after {ran:.0f} s, more than the {mib:.0f} MiB allowed"
            elif ran > time_limit_s:
                why = f"it ran {ran:.0f} s, longer than the {time_limit_s:.0f} s allowed"
            if why:
                stop_group(proc, timeout=1.0)
                break
            time.sleep(0.2)
    return proc.returncode, log_path.read_text(errors="replace"), why


def run_perf_analyzer_rate(
    binary: str,
    model: ModelSpec,
    url: str,
    input_file: Path,
    rate: float,
    duration_s: float,
    workdir: Path,
    tls: Tls | None = None,
    max_rss_bytes: int | None = None,
) -> RateRun:
    """Offer `rate` requests a second to `model`'s served model on `url` (gRPC) for `duration_s` with perf_analyzer,
    open loop (perf_analyzer_rate_command), stopped past `max_rss_bytes` (default RATE_MAX_RSS_BYTES) or
    rate_time_limit_s (RateRun.outran)."""

    csv_file = workdir / f"{model.artifact_name}_rate{rate:.0f}_perf_analyzer.csv"
    csv_file.unlink(missing_ok=True)  # a CSV left by an earlier run must not pass for this one's
    argv = perf_analyzer_rate_command(binary, model.name, url, input_file, csv_file, rate, duration_s, tls)
    t0 = time.perf_counter()
    returncode, printed, outran = _run_bounded(
        argv, csv_file.with_suffix(".log"), max_rss_bytes or RATE_MAX_RSS_BYTES, rate_time_limit_s(duration_s)
    )
    run = RateRun(returncode, time.perf_counter() - t0, delayed_share=parse_delayed_share(printed), outran=outran)
    said = [line.strip() for line in printed.splitlines() if line.strip()]
    if outran:
        run.message = f"perf_analyzer could not keep up with {rate:.0f}/s: {outran}"
        return run
    if returncode != 0 or not csv_file.exists():
        # It repeats the server's words per thread: "Thread [0] had error: in ensemble 'ernie_seqcls', ...
        # Exceeds maximum queue size" (measured).
        run.refused = any(words in line for line in said for words in REFUSALS)
        errors = [line for line in said if "error" in line.lower()] or said[-1:] or ["no output"]
        run.message = f"perf_analyzer exited {returncode}: {errors[0]}"
        return run
    parsed = parse_perf_analyzer_csv(csv_file.read_text())
    if parsed:
        run.throughput, run.p50_ms, run.p99_ms = parsed[0]["throughput"], parsed[0]["p50_ms"], parsed[0]["p99_ms"]
    return run
