"""perf_analyzer, Triton's C++ load generator, as a driver of the served rows: where it is, its input file and
command, its CSV, and one measured cell, with each pipeline step's queue and compute time from the server's
statistics (what perf_analyzer prints as "Composing models"; read by server.stats for either load generator). Its
open-loop runs at a fixed request rate are in bench/perf_analyzer_rate.py.

perf_analyzer 2.41.0 comes from the tritonclient 2.41.0 wheel (`scripts/install_perf_analyzer.sh` unpacks it into
the cache; newer PyPI builds need glibc 2.38); in NVIDIA's Triton SDK image it is on PATH.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from ernie_deploy.bench.rows import Row
from ernie_deploy.client.grpc_client import input_columns
from ernie_deploy.core.errors import InstallError
from ernie_deploy.core.files import atomic_path
from ernie_deploy.core.paths import cache_dir
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.core.tasks import TaskSpec
from ernie_deploy.core.tls import Tls
from ernie_deploy.server.procs import group_cpu_seconds
from ernie_deploy.server.stats import ModelTimes, snapshot, steps_between

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
        raise InstallError(
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
        window = time_windows(duration_s)
    load = [f"--concurrency-range={concurrency}:{concurrency}"]
    return base_command(binary, model, url, input_file, csv_file, batch, load, window, tls)


def time_windows(duration_s: float) -> list[str]:
    return ["--measurement-mode=time_windows", f"--measurement-interval={max(1, round(duration_s * 1000 / WINDOWS))}"]


def base_command(
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
        raise InstallError(
            "not a perf_analyzer CSV: no Inferences/Second column",
            f"use perf_analyzer 2.41.0, whose -f CSV has it (`bash {INSTALL_SCRIPT}` unpacks that one)",
        )
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


# -- one cell ----------------------------------------------------------------------------------------


def _children_cpu_seconds() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_perf_analyzer(
    binary: str,
    model: ModelSpec,
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

    csv_file = workdir / f"{model.artifact_name}_{kind}_b{batch}_c{concurrency}_perf_analyzer.csv"
    argv = perf_analyzer_command(
        binary, model.name, url, input_file, csv_file, concurrency, batch, duration_s, requests, tls
    )
    row = Row(model.artifact_name, kind, batch, concurrency, tool=PERF_ANALYZER)
    before, server0, cpu0 = snapshot(stats_url), group_cpu_seconds(server_pgid), _children_cpu_seconds()
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    cpu, server1, after = _children_cpu_seconds() - cpu0, group_cpu_seconds(server_pgid), snapshot(stats_url)
    ensemble = after.get(model.name, ModelTimes()) - before.get(model.name, ModelTimes())
    answered, items = ensemble.requests, ensemble.texts
    row.errors = ensemble.failed
    row.steps = steps_between(before, after, model.name)
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
