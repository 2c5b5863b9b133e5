"""perf_analyzer, Triton's C++ load generator, as a driver of the served rows: where it is, its input file and
command, its CSV, and one measured cell, with each pipeline step's queue and compute time from the server's
statistics (what perf_analyzer prints as "Composing models"; read by server.stats for either load generator).

perf_analyzer 2.41.0 comes from the tritonclient 2.41.0 wheel (`scripts/install_perf_analyzer.sh` unpacks it into
the cache; newer PyPI builds need glibc 2.38); in NVIDIA's Triton SDK image it is on PATH.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ernie_deploy.bench.rows import Row
from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.paths import cache_dir
from ernie_deploy.core.tasks import TaskSpec
from ernie_deploy.core.tls import Tls

PYTHON, PERF_ANALYZER = "python", "perf_analyzer"  # Row.tool
INSTALL_SCRIPT = "scripts/install_perf_analyzer.sh"


def cached_binary() -> Path:
    """Where the install script puts its wrapper (which sets the library path and runs the binary)."""
    return cache_dir() / "tools" / "perf_analyzer" / "bin" / "perf_analyzer"


def _starts(binary: str) -> bool:
    # A perf_analyzer on PATH can be one that cannot load here (the 2.58+ PyPI wheels need glibc 2.38: measured).
    try:
        return subprocess.run([binary, "--version"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def find_perf_analyzer() -> str | None:
    """A perf_analyzer that starts: the one on PATH, else the install script's; None when there is none."""
    for candidate in (shutil.which(PERF_ANALYZER), str(cached_binary())):
        if candidate and Path(candidate).is_file() and _starts(candidate):
            return candidate
    return None


def require_perf_analyzer() -> str:
    binary = find_perf_analyzer()
    if not binary:
        raise ErnieDeployError(
            f"perf_analyzer is neither on PATH nor in {cached_binary().parent.parent}",
            f"run `bash {INSTALL_SCRIPT}` (it unpacks perf_analyzer 2.41.0 into the cache), run inside NVIDIA's "
            "Triton SDK image, or use `--load-generator python`",
        )
    return binary


def perf_analyzer_version(binary: str) -> str | None:
    try:
        proc = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30)
        out = proc.stdout + proc.stderr  # 2.41.0 prints it on stderr
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.strip().splitlines()[-1] if out.strip() else None


# -- input, command, CSV -----------------------------------------------------------------------------


def perf_analyzer_input(task: TaskSpec, texts: Sequence, path: str | Path) -> Path:
    """The texts as perf_analyzer real input data: one entry per text (or pair), each input a BYTES [1] tensor."""
    from ernie_deploy.client.grpc_client import input_columns
    from ernie_deploy.core.files import atomic_path

    path = Path(path)
    columns = input_columns(task, list(texts))
    names = [spec.name for spec in task.inputs]
    data = {"data": [{n: {"content": [t], "shape": [1]} for n, t in zip(names, item)} for item in zip(*columns)]}
    with atomic_path(path, suffix=".json") as tmp:
        tmp.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


# perf_analyzer reports the last 3 measurement windows once they agree within --stability-percentage, trying up to
# --max-trials windows; when they never agree it exits 2 and writes no CSV (measured: -s 1 -r 3 on this host).
# A stability bound of 999% makes the first 3 windows the answer, so a cell takes `duration_s` like the Python
# generator's (measured: 3 windows of 1,667 ms took 6.0 s of wall time with the process start), and the server is
# warmed up beforehand instead (run_perf_analyzer's warm-up).
WINDOWS = 3
STABILITY_PERCENT = 999
# Past capacity the queue, and so the latency, grows from one window to the next by more than 999% allows (measured:
# the demo classifier without a queue bound at 1x of a capacity measured on a busy host exited 2, "Failed to obtain
# stable measurement"); a bound this loose takes the 3 windows whatever they are (measured at 2x: exit 0).
RATE_STABILITY_PERCENT = 1_000_000


def perf_analyzer_command(
    binary: str,
    model: str,
    url: str,
    input_file: str | Path,
    csv_file: str | Path,
    concurrency: int,
    batch: int = 1,
    duration_s: float = 10.0,
    requests: int | None = None,
    tls: Tls | None = None,
) -> list[str]:
    """One perf_analyzer run at one concurrency (a list like 1,4,8,16 is no start:end:step range) over gRPC (with
    `tls`, over TLS), measured over `duration_s` (3 windows of a third each) or `requests` requests."""
    if requests:
        window = ["--measurement-mode=count_windows", f"--measurement-request-count={max(1, -(-requests // WINDOWS))}"]
    else:
        window = _time_windows(duration_s)
    load = [f"--concurrency-range={concurrency}:{concurrency}"]
    return _command(binary, model, url, input_file, csv_file, batch, load, window, tls)


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
    window = _time_windows(duration_s)
    return _command(binary, model, url, input_file, csv_file, 1, load, window, tls, RATE_STABILITY_PERCENT)


def _time_windows(duration_s: float) -> list[str]:
    return ["--measurement-mode=time_windows", f"--measurement-interval={max(1, round(duration_s * 1000 / WINDOWS))}"]


def _command(
    binary: str,
    model: str,
    url: str,
    input_file: str | Path,
    csv_file: str | Path,
    batch: int,
    load: list[str],
    window: list[str],
    tls: Tls | None,
    stability_percent: int = STABILITY_PERCENT,
) -> list[str]:
    return [
        binary,
        "-m",
        model,
        "-u",
        url,
        "-i",
        "grpc",
        "-b",
        str(batch),
        "--input-data",
        str(input_file),
        *load,
        *window,
        f"--stability-percentage={stability_percent}",
        f"--max-trials={WINDOWS}",
        "--verbose-csv",
        "-f",
        str(csv_file),
        *perf_analyzer_tls_args(tls),
    ]


def perf_analyzer_tls_args(tls: Tls | None) -> list[str]:
    """perf_analyzer's gRPC TLS options (its command_line_parser: --ssl-grpc-use-ssl takes no value; without a root
    file it trusts the system's CAs)."""
    if tls is None:
        return []
    files = [
        ("--ssl-grpc-root-certifications-file", tls.ca),
        ("--ssl-grpc-private-key-file", tls.key),
        ("--ssl-grpc-certificate-chain-file", tls.cert),
    ]
    return ["--ssl-grpc-use-ssl", *(f"{flag}={path}" for flag, path in files if path is not None)]


def parse_perf_analyzer_csv(text: str) -> list[dict]:
    """perf_analyzer's `-f` CSV -> one dict per concurrency (or request rate), sorted by it: throughput (its
    Inferences/Second, which counts every item of a batch, so sequences/s; in rate mode what was answered, not what
    was sent) and latencies in ms (the CSV has microseconds)."""
    import csv
    import io

    reader = csv.DictReader(io.StringIO(text.strip()))
    if not reader.fieldnames or "Inferences/Second" not in reader.fieldnames:
        raise ErnieDeployError("not a perf_analyzer CSV: no Inferences/Second column")
    rows = []
    for record in reader:
        record = {k.strip(): (v or "").strip() for k, v in record.items() if k}

        def ms(column: str, record: dict = record) -> float | None:
            return float(record[column]) / 1000 if record.get(column) else None

        concurrency, rate = record.get("Concurrency"), record.get("Request Rate")
        rows.append(
            {
                "concurrency": int(float(concurrency)) if concurrency else None,
                "request_rate": float(rate) if rate else None,
                "throughput": float(record["Inferences/Second"]),
                "p50_ms": ms("p50 latency"),
                "p90_ms": ms("p90 latency"),
                "p95_ms": ms("p95 latency"),
                "p99_ms": ms("p99 latency"),
                "mean_ms": ms("Avg latency"),
            }
        )
    return sorted(rows, key=lambda r: (r["concurrency"] is None, r["concurrency"] or 0))


def parse_request_count(stdout: str) -> int | None:
    """The client's measured request count from perf_analyzer's printout (the CSV has only rates)."""
    import re

    match = re.search(r"Client:\s*\n\s*Request count:\s*(\d+)", stdout)
    return int(match.group(1)) if match else None


def parse_delayed_share(stdout: str) -> float:
    """The share of requests a rate run sent later than their schedule (perf_analyzer prints it only when some
    were: "... 11.53% of the requests were delayed")."""
    import re

    match = re.search(r"([\d.]+)% of the requests were delayed", stdout)
    return float(match.group(1)) / 100 if match else 0.0


# -- one cell ----------------------------------------------------------------------------------------


def _children_cpu_seconds() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_perf_analyzer(
    binary: str,
    task: TaskSpec,
    url: str,
    stats_url: str,
    input_file: Path,
    kind: str,
    batch: int,
    concurrency: int,
    duration_s: float,
    workdir: Path,
    *,
    requests: int | None = None,
    server_pgid: int | None = None,
    tls: Tls | None = None,
) -> Row:
    """One served cell driven by perf_analyzer on `url` (gRPC); `stats_url`: the server's HTTP endpoint, for its
    statistics. perf_analyzer's process CPU (a waited-for child's, from getrusage) and the
    server's CPU are divided by what the server answered while it ran (its statistics), warm-up windows
    included, since perf_analyzer's printout counts only the measured windows."""
    from ernie_deploy.server.procs import group_cpu_seconds
    from ernie_deploy.server.stats import ModelTimes, snapshot, steps_between

    csv_file = workdir / f"{task.artifact_name}_{kind}_b{batch}_c{concurrency}_perf_analyzer.csv"
    argv = perf_analyzer_command(
        binary, task.ensemble, url, input_file, csv_file, concurrency, batch, duration_s, requests, tls
    )
    row = Row(task.artifact_name, kind, batch, concurrency, tool=PERF_ANALYZER)
    before, server0, cpu0 = snapshot(stats_url), group_cpu_seconds(server_pgid), _children_cpu_seconds()
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    cpu, server1, after = _children_cpu_seconds() - cpu0, group_cpu_seconds(server_pgid), snapshot(stats_url)
    ensemble = after.get(task.ensemble, ModelTimes()) - before.get(task.ensemble, ModelTimes())
    answered, items = ensemble.requests, ensemble.texts
    row.errors = ensemble.failed
    row.steps = steps_between(before, after, task.ensemble)
    if answered:
        row.client_cpu_ms = 1000 * cpu / answered
    if items and server0 is not None and server1 is not None:
        row.server_cpu_ms = 1000 * (server1 - server0) / items
    if proc.returncode != 0 or not csv_file.exists():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        row.errors = max(row.errors, 1)
        row.note = f"perf_analyzer exited {proc.returncode}: " + " | ".join(tail)
        return row
    parsed = [r for r in parse_perf_analyzer_csv(csv_file.read_text()) if r["concurrency"] in (concurrency, None)]
    if not parsed:
        row.errors = max(row.errors, 1)
        row.note = f"perf_analyzer wrote no row for concurrency {concurrency}"
        return row
    got = parsed[0]
    row.throughput, row.p50_ms, row.p95_ms, row.p99_ms, row.mean_ms = (
        got["throughput"],
        got["p50_ms"],
        got["p95_ms"],
        got["p99_ms"],
        got["mean_ms"],
    )
    row.requests = parse_request_count(proc.stdout) or answered
    row.sequences = row.requests * batch
    row.seconds = row.sequences / row.throughput if row.throughput else wall
    return row


# -- one open-loop run ---------------------------------------------------------------------------------


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
    from ernie_deploy.server.procs import group_rss_bytes, start_group, stop_group

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
    task: TaskSpec,
    url: str,
    input_file: Path,
    rate: float,
    duration_s: float,
    workdir: Path,
    tls: Tls | None = None,
    max_rss_bytes: int | None = None,
) -> RateRun:
    """Offer `rate` requests a second to `task`'s served model on `url` (gRPC) for `duration_s` with perf_analyzer,
    open loop (perf_analyzer_rate_command), stopped past `max_rss_bytes` (default RATE_MAX_RSS_BYTES) or
    rate_time_limit_s (RateRun.outran)."""
    from ernie_deploy.bench.load import REFUSALS

    csv_file = workdir / f"{task.artifact_name}_rate{rate:.0f}_perf_analyzer.csv"
    csv_file.unlink(missing_ok=True)  # a CSV left by an earlier run must not pass for this one's
    argv = perf_analyzer_rate_command(binary, task.ensemble, url, input_file, csv_file, rate, duration_s, tls)
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
