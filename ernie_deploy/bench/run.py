"""`ernie-deploy bench`: how close the served pipeline comes to what this machine can do, in one run.

Per task, on the task's test texts, these rows are measured (throughput in sequences/s, latency in ms):

    limit          the same ONNX model in-process (onnxruntime), every batch size, tokenization excluded
    limit+tok      the same, tokenizing each batch first (what a server has to do too)
    paddle         Paddle Inference in-process, for reference (skipped when paddle is not installed)
    served         the ensemble over gRPC on a real tritonserver, asyncio load, one text per request
    served bN      the same with N texts per request
    classic        the classic layout (every text padded to 128 tokens, no dynamic batching, one instance),
                   same load generator, one text per request

Servers run one at a time (a second would share the cores), and every number that a ratio divides was
measured in the same run. Imports are lazy: the CLI builds its parser from this module.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import re
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.files import atomic_path
from ernie_deploy.server.procs import group_cpu_seconds
from ernie_deploy.core.tasks import TEXT_INPUT, TaskSpec

SCHEMA = 1
BATCH_SIZES = (1, 8, 16, 32, 64)
CONCURRENCY = (1, 4, 8, 16)
CLIENT_BATCH = 8
REFERENCE_CONCURRENCY = 8  # the ratios compare served and classic at this concurrency
MIN_CALLS = 3  # an in-process cell runs at least this many calls, however short its duration

# Row kinds, in the order the tables show them.
LIMIT, LIMIT_TOK, LIMIT_INT8, PADDLE, SERVED, SERVED_BATCH, FUSED, CLASSIC = "limit", "limit_tok", "limit_int8", \
    "paddle", "served", "served_batch", "fused", "classic"
KINDS = (LIMIT, LIMIT_TOK, LIMIT_INT8, PADDLE, SERVED, SERVED_BATCH, FUSED, CLASSIC)
KIND_LABELS = {
    LIMIT: "limit: onnxruntime in-process, tokenization excluded",
    LIMIT_TOK: "limit: onnxruntime in-process, tokenization included",
    LIMIT_INT8: "limit, INT8 (`convert --quantize int8`): onnxruntime in-process, tokenization excluded",
    PADDLE: "paddle: Paddle Inference in-process, tokenization excluded",
    SERVED: "served: ensemble over gRPC, 1 text per request",
    SERVED_BATCH: "served: ensemble over gRPC, {batch} texts per request",
    FUSED: "served, fused (`build --fused`: one python model per task) over gRPC, 1 text per request",
    CLASSIC: "classic: padded to {max_seq_len}, no dynamic batching, 1 instance; 1 text per request",
}

BEGIN_MARK = "<!-- bench:begin -->"
END_MARK = "<!-- bench:end -->"
MARKDOWN_TEMPLATE = f"""# Benchmarks

Throughput and latency of the served pipeline next to its limits, measured by `ernie-deploy bench`
(`bash scripts/bench.sh`). Everything between the two `bench` marker comments below is rewritten by
each run; the rest of this file is hand-written and kept.

{BEGIN_MARK}
{END_MARK}

## Levers

_Hand-written, kept by the generator: what moves these numbers, and by how much._
"""


# -- statistics -------------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), numpy's linear interpolation; NaN for no values."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} is outside 0..100")
    return float(np.percentile(values, q)) if len(values) else math.nan


@dataclass
class Row:
    """One measured cell. Latency is per call (in-process) or per request (served), in ms."""

    task: str
    kind: str
    batch: int  # texts per call or per request
    concurrency: int | None = None  # served rows: workers sending back to back
    requests: int = 0  # calls or requests measured
    sequences: int = 0  # texts in them
    errors: int = 0  # failed or malformed responses (warm-up included)
    seconds: float = 0.0  # measured wall time
    throughput: float | None = None  # sequences/s
    p50_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    mean_ms: float | None = None
    best: bool = False  # the best batch size of its kind (in-process rows)
    client_cpu_ms: float | None = None  # load generator CPU per request (all its threads)
    server_cpu_ms: float | None = None  # server CPU (tritonserver and its python stubs) per sequence
    tokenize_share: float | None = None  # limit_tok rows: tokenize time / (tokenize + model)
    tool: str = "python"  # "python" (this module) or "perf_analyzer"
    note: str = ""

    @classmethod
    def from_dict(cls, data: dict) -> "Row":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    @property
    def label(self) -> str:
        text = {LIMIT: "limit", LIMIT_TOK: "limit+tok", LIMIT_INT8: "limit int8", PADDLE: "paddle", SERVED: "served",
                SERVED_BATCH: f"served b{self.batch}", FUSED: "fused", CLASSIC: "classic"}.get(self.kind, self.kind)
        return text


def summarize(row: Row, latencies_s: Sequence[float], sequences: int, seconds: float) -> Row:
    """Fill a row's counts, throughput and latency percentiles from per-call latencies in seconds."""
    row.requests = len(latencies_s)
    row.sequences = sequences
    row.seconds = seconds
    row.throughput = sequences / seconds if seconds > 0 else None
    if latencies_s:
        ms = [v * 1000 for v in latencies_s]
        row.p50_ms, row.p95_ms, row.p99_ms = (percentile(ms, q) for q in (50, 95, 99))
        row.mean_ms = sum(ms) / len(ms)
    return row


def mark_best(rows: Iterable[Row]) -> Row | None:
    """Flag the highest-throughput row (per kind, the caller's grouping); returns it."""
    rows = [r for r in rows if r.throughput]
    for r in rows:
        r.best = False
    if not rows:
        return None
    best = max(rows, key=lambda r: r.throughput)
    best.best = True
    return best


def chunks(texts: Sequence[str], batch: int) -> list[list[str]]:
    """Consecutive batches of `batch` texts, cycling through the texts when there are fewer than `batch`."""
    if not texts:
        raise ErnieDeployError("no texts to benchmark on", "check the test split (--data)")
    if len(texts) < batch:
        texts = [texts[i % len(texts)] for i in range(batch)]
    return [list(texts[i:i + batch]) for i in range(0, len(texts) - batch + 1, batch)]


# -- settings and inputs ---------------------------------------------------------------------------


@dataclass
class BenchConfig:
    batch_sizes: tuple[int, ...] = BATCH_SIZES
    concurrency: tuple[int, ...] = CONCURRENCY
    duration_s: float = 10.0  # per served cell
    inproc_duration_s: float = 5.0  # per in-process cell
    warmup_s: float = 1.0  # before each cell, not measured
    requests: int | None = None  # per served cell, instead of duration_s
    client_batch: int = CLIENT_BATCH  # texts per request of the batched served variant
    max_texts: int | None = None  # use only the first N test texts
    paddle: bool = True
    int8: bool = True  # quantize the model (as `convert --quantize int8` does) and add its in-process rows
    fused: bool = True
    classic: bool = True
    check_texts: int = 64  # texts whose served answers are compared with in-process ONNX
    perf_analyzer: str | None = None  # path to perf_analyzer: it drives the served rows instead
    server_timeout_s: float = 180.0
    progress: bool = True

    @classmethod
    def smoke(cls, **overrides) -> "BenchConfig":
        """A tiny run that exercises every row (what CI runs): timings from it mean nothing."""
        values = dict(batch_sizes=(1, 8), concurrency=(1, 2), duration_s=1.0, inproc_duration_s=0.3, warmup_s=0.2,
                      client_batch=4, max_texts=64, check_texts=16)
        values.update(overrides)
        return cls(**values)


@dataclass
class TaskInputs:
    """One task's files and texts: what the in-process rows run, and what the repositories are built from."""

    task: TaskSpec
    onnx: Path
    static: object  # ernie_deploy.export.static.StaticModel: vocab, labels, and the Paddle model
    texts: list[str]


# -- machine and versions --------------------------------------------------------------------------


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
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "usable_cores": usable, "memory_gib": memory,
            "platform": platform.platform(), "python": platform.python_version(), "loadavg_start": _loadavg()}


def _loadavg() -> list[float] | None:
    """1, 5 and 15 minute load averages: other work on the machine shows here, and skews every row."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def package_versions() -> dict:
    from importlib import metadata

    versions = {}
    for dist in ("onnxruntime", "tritonclient", "nvidia-pytriton", "paddlepaddle", "tokenizers", "numpy"):
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


def _self_cpu_seconds() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# -- in-process rows -------------------------------------------------------------------------------


def _run_cell(step: Callable[[object], float], items: Sequence, sizes: Sequence[int], duration_s: float,
              warmup_s: float) -> tuple[list[float], int, float, float]:
    """Call step(item) back to back over items (cycling): warm-up, then at least `duration_s` and MIN_CALLS
    calls. step returns the seconds of the call spent tokenizing. Returns (latencies, sequences, wall,
    tokenize seconds)."""
    i = 0
    warm_until = time.perf_counter() + warmup_s
    while True:
        step(items[i % len(items)])
        i += 1
        if time.perf_counter() >= warm_until:
            break
    latencies, sequences, tokenize = [], 0, 0.0
    start = time.perf_counter()
    deadline = start + duration_s
    while True:
        k = i % len(items)
        t0 = time.perf_counter()
        tokenize += step(items[k])
        t1 = time.perf_counter()
        latencies.append(t1 - t0)
        sequences += sizes[k]
        i += 1
        if t1 >= deadline and len(latencies) >= MIN_CALLS:
            return latencies, sequences, t1 - start, tokenize


def bench_inprocess(inputs: TaskInputs, config: BenchConfig, tokenizer, progress=None,
                    int8_onnx: Path | None = None) -> list[Row]:
    """limit and limit+tok rows at every batch size, then paddle at every batch size (best one kept as the
    row shown), each model freed before the next so that no idle thread pool competes with the servers."""
    from ernie_deploy.serving.runtime import OnnxModel
    from ernie_deploy.serving.tokenizer import encode_batch

    task = inputs.task
    max_len = task.max_seq_len
    rows: list[Row] = []
    model = OnnxModel(inputs.onnx)
    int8 = OnnxModel(int8_onnx) if int8_onnx else None
    for batch in config.batch_sizes:
        batches = chunks(inputs.texts, batch)
        sizes = [len(b) for b in batches]
        encoded = [encode_batch(tokenizer, b, max_len) for b in batches]  # once: tokenization excluded

        # The INT8 cell right after its FP32 cell, on the same batches, so that the two see the same machine.
        for kind, session in ((LIMIT, model), (LIMIT_INT8, int8)):
            if session is None:
                continue

            def run_encoded(enc, session=session) -> float:
                session(enc.input_ids, enc.token_type_ids)
                return 0.0

            lat, seqs, wall, _ = _run_cell(run_encoded, encoded, sizes, config.inproc_duration_s, config.warmup_s)
            rows.append(summarize(Row(task.name, kind, batch), lat, seqs, wall))
            _tick(progress, rows[-1])

        def run_texts(texts) -> float:
            t0 = time.perf_counter()
            enc = encode_batch(tokenizer, texts, max_len)
            t1 = time.perf_counter()
            model(enc.input_ids, enc.token_type_ids)
            return t1 - t0

        lat, seqs, wall, tok = _run_cell(run_texts, batches, sizes, config.inproc_duration_s, config.warmup_s)
        row = summarize(Row(task.name, LIMIT_TOK, batch), lat, seqs, wall)
        row.tokenize_share = tok / sum(lat) if lat else None
        rows.append(row)
        _tick(progress, row)
    model = int8 = None  # free the sessions (and their thread pools) before the servers run
    mark_best([r for r in rows if r.kind == LIMIT])
    mark_best([r for r in rows if r.kind == LIMIT_INT8])
    mark_best([r for r in rows if r.kind == LIMIT_TOK])
    if config.paddle:
        rows.extend(bench_paddle(inputs, config, tokenizer, progress))
    return rows


def paddle_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("paddle") is not None


def bench_paddle(inputs: TaskInputs, config: BenchConfig, tokenizer, progress=None) -> list[Row]:
    """Paddle Inference on the serving tokenizer's ids (identical to paddlenlp's), with as many math threads as
    onnxruntime gets. One row per batch size; the best is marked."""
    from ernie_deploy.serving.tokenizer import encode_batch

    task = inputs.task
    if not paddle_available():
        row = Row(task.name, PADDLE, 0, note="skipped: paddle is not installed (pip install -e .[export])")
        _tick(progress, row)
        return [row]
    from ernie_deploy.export.static import PaddlePredictor

    threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    predictor = PaddlePredictor(inputs.static, threads=threads)
    rows = []
    for batch in config.batch_sizes:
        batches = chunks(inputs.texts, batch)
        encoded = [encode_batch(tokenizer, b, task.max_seq_len) for b in batches]

        def run(enc) -> float:
            predictor(enc.input_ids, enc.token_type_ids)
            return 0.0

        lat, seqs, wall, _ = _run_cell(run, encoded, [len(b) for b in batches], config.inproc_duration_s,
                                       config.warmup_s)
        rows.append(summarize(Row(task.name, PADDLE, batch, note=f"{threads} math threads"), lat, seqs, wall))
        _tick(progress, rows[-1])
    predictor = None  # as above
    mark_best(rows)
    return rows


def reference_predictions(inputs: TaskInputs, texts: list[str]) -> list:
    """What the ensemble must answer for `texts`: in-process ONNX with the serving tokenizer and the
    postprocess logic."""
    from ernie_deploy.evaluate.offline import onnx_predictions

    return onnx_predictions(inputs.task, inputs.onnx, inputs.static.vocab_file, inputs.static.labels, texts)


# -- served rows: the asyncio load generator --------------------------------------------------------


@dataclass
class PreparedRequest:
    inputs: list  # tritonclient InferInput, serialized once
    size: int  # texts in it


def prepare_requests(texts: Sequence[str], batch: int) -> list[PreparedRequest]:
    """Every request serialized once, up front, so that the load generator (which shares the cores with the
    server) spends its time sending, not encoding."""
    from tritonclient.grpc import InferInput

    requests = []
    for chunk in chunks(texts, batch):
        data = np.array([t.encode("utf-8") for t in chunk], dtype=np.object_).reshape(-1, 1)
        tensor = InferInput(TEXT_INPUT.name, list(data.shape), "BYTES")
        tensor.set_data_from_numpy(data)
        requests.append(PreparedRequest([tensor], len(chunk)))
    return requests


@dataclass
class LoadResult:
    latencies_s: list[float] = field(default_factory=list)
    sequences: int = 0
    seconds: float = 0.0
    errors: int = 0
    error_messages: list[str] = field(default_factory=list)
    client_cpu_s: float = 0.0
    server_cpu_s: float | None = None


async def _drive(url: str, task: TaskSpec, requests: list[PreparedRequest], concurrency: int, warmup_s: float,
                 duration_s: float, count: int | None, server_pgid: int | None) -> LoadResult:
    import asyncio

    from tritonclient.grpc import InferRequestedOutput
    from tritonclient.grpc.aio import InferenceServerClient
    from tritonclient.utils import InferenceServerException

    outputs = [InferRequestedOutput(o.name) for o in task.outputs]
    result = LoadResult()
    cursor = [0]  # next request index, shared by the workers: texts cycle through the split

    def failed(message: str) -> None:
        result.errors += 1
        if len(result.error_messages) < 3 and message not in result.error_messages:
            result.error_messages.append(message)

    async def worker(client, until: float, budget: list[int] | None, record: bool) -> None:
        while True:
            if budget is not None:
                if budget[0] <= 0:
                    return
                budget[0] -= 1
            elif time.perf_counter() >= until:
                return
            request = requests[cursor[0] % len(requests)]
            cursor[0] += 1
            t0 = time.perf_counter()
            try:
                response = (await client.infer(task.ensemble, request.inputs, outputs=outputs)).get_response()
                # A cheap structural check; decoding every answer would cost the client more than the server.
                ok = len(response.outputs) == len(outputs) and all(o.shape[:1] == [request.size]
                                                                    for o in response.outputs)
                if not ok:
                    failed(f"malformed response: outputs {[(o.name, list(o.shape)) for o in response.outputs]}")
            except InferenceServerException as exc:
                ok = False
                failed(exc.message() or str(exc))
            t1 = time.perf_counter()
            if record and ok:
                result.latencies_s.append(t1 - t0)
                result.sequences += request.size

    async with InferenceServerClient(url=url) as client:
        if warmup_s > 0:
            until = time.perf_counter() + warmup_s
            await asyncio.gather(*(worker(client, until, None, False) for _ in range(concurrency)))
        cpu0, server0 = _self_cpu_seconds(), group_cpu_seconds(server_pgid)
        start = time.perf_counter()
        budget = [count] if count else None
        await asyncio.gather(*(worker(client, start + duration_s, budget, True) for _ in range(concurrency)))
        result.seconds = time.perf_counter() - start
        result.client_cpu_s = _self_cpu_seconds() - cpu0
        server1 = group_cpu_seconds(server_pgid)
        result.server_cpu_s = server1 - server0 if server0 is not None and server1 is not None else None
    return result


def run_load(url: str, task: TaskSpec, requests: list[PreparedRequest], concurrency: int, *, warmup_s: float = 1.0,
             duration_s: float = 10.0, count: int | None = None, server_pgid: int | None = None) -> LoadResult:
    """`concurrency` workers send requests back to back (after a warm-up) for `duration_s`, or `count`
    requests in all; one gRPC channel, one event loop."""
    import asyncio

    return asyncio.run(_drive(url, task, requests, concurrency, warmup_s, duration_s, count, server_pgid))


def load_row(task: TaskSpec, kind: str, batch: int, concurrency: int, result: LoadResult) -> Row:
    row = summarize(Row(task.name, kind, batch, concurrency), result.latencies_s, result.sequences, result.seconds)
    row.errors = result.errors
    if row.requests:
        row.client_cpu_ms = 1000 * result.client_cpu_s / row.requests
    if row.sequences and result.server_cpu_s is not None:
        row.server_cpu_ms = 1000 * result.server_cpu_s / row.sequences
    if result.error_messages:
        row.note = "errors: " + " | ".join(m.splitlines()[0][:160] for m in result.error_messages)
    return row


# -- perf_analyzer (NVIDIA's SDK image): an alternative driver of the served rows ---------------------


def perf_analyzer_input(texts: Sequence[str], path: str | Path) -> Path:
    """The texts as perf_analyzer real input data: one entry per text, each a BYTES [1] tensor."""
    path = Path(path)
    data = {"data": [{TEXT_INPUT.name: {"content": [t], "shape": [1]}} for t in texts]}
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


def perf_analyzer_command(binary: str, model: str, url: str, input_file: str | Path, csv_file: str | Path,
                          concurrency: int, batch: int = 1, duration_s: float = 10.0) -> list[str]:
    """One perf_analyzer run at one concurrency (a list like 1,4,8,16 is no start:end:step range)."""
    return [binary, "-m", model, "-u", url, "-i", "grpc", "-b", str(batch),
            "--input-data", str(input_file), f"--concurrency-range={concurrency}:{concurrency}",
            "--measurement-mode=time_windows", f"--measurement-interval={max(1, round(duration_s * 1000))}",
            "-f", str(csv_file)]


def parse_perf_analyzer_csv(text: str) -> list[dict]:
    """perf_analyzer's `-f` CSV -> one dict per concurrency, sorted by it: throughput (its Inferences/Second,
    which counts every item of a batch, so sequences/s) and latencies in ms (the CSV has microseconds)."""
    import csv
    import io

    reader = csv.DictReader(io.StringIO(text.strip()))
    if not reader.fieldnames or "Inferences/Second" not in reader.fieldnames:
        raise ErnieDeployError("not a perf_analyzer CSV: no Inferences/Second column")
    rows = []
    for record in reader:
        record = {k.strip(): (v or "").strip() for k, v in record.items() if k}

        def ms(column: str) -> float | None:
            return float(record[column]) / 1000 if record.get(column) else None

        concurrency = record.get("Concurrency")
        rows.append({
            "concurrency": int(float(concurrency)) if concurrency else None,
            "throughput": float(record["Inferences/Second"]),
            "p50_ms": ms("p50 latency"), "p90_ms": ms("p90 latency"), "p95_ms": ms("p95 latency"),
            "p99_ms": ms("p99 latency"), "mean_ms": ms("Avg latency"),
        })
    return sorted(rows, key=lambda r: (r["concurrency"] is None, r["concurrency"] or 0))


def run_perf_analyzer(binary: str, task: TaskSpec, url: str, texts: Sequence[str], kind: str, batch: int,
                      concurrency: int, duration_s: float, workdir: Path) -> Row:
    import subprocess

    input_file = perf_analyzer_input(texts, workdir / f"{task.name}_input.json")
    csv_file = workdir / f"{task.name}_{kind}_b{batch}_c{concurrency}.csv"
    argv = perf_analyzer_command(binary, task.ensemble, url, input_file, csv_file, concurrency, batch, duration_s)
    proc = subprocess.run(argv, capture_output=True, text=True)
    row = Row(task.name, kind, batch, concurrency, tool="perf_analyzer")
    if proc.returncode != 0 or not csv_file.exists():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        row.errors = 1
        row.note = f"perf_analyzer exited {proc.returncode}: " + " | ".join(tail)
        return row
    parsed = [r for r in parse_perf_analyzer_csv(csv_file.read_text()) if r["concurrency"] in (concurrency, None)]
    if not parsed:
        row.errors = 1
        row.note = f"perf_analyzer wrote no row for concurrency {concurrency}"
        return row
    got = parsed[0]
    row.throughput, row.p50_ms, row.p95_ms, row.p99_ms, row.mean_ms = (got["throughput"], got["p50_ms"],
                                                                        got["p95_ms"], got["p99_ms"], got["mean_ms"])
    row.note = "perf_analyzer"
    return row


# -- a server's rows -------------------------------------------------------------------------------


def _tick(progress, row: Row) -> None:
    if progress is None:
        return
    progress.update(1)
    if row.throughput:
        where = f"b{row.batch}" if row.concurrency is None else f"c{row.concurrency}"
        progress.set_postfix_str(f"{row.task} {row.label} {where}: {row.throughput:.0f} seq/s")


def bench_server(repository: Path, name: str, inputs: list[TaskInputs], config: BenchConfig, references: dict,
                 workdir: Path, progress=None) -> tuple[dict, list[Row]]:
    """Start tritonserver on `repository`, measure its rows for every task, stop it. `name` is "served" or
    "classic". Returns (server facts, rows)."""
    from ernie_deploy.client.grpc_client import Client, decode_outputs
    from ernie_deploy.server.serve import TritonServer

    server = TritonServer(repository, http_port=0, grpc_port=0, metrics_port=0,
                          log_file=workdir / f"{name}_tritonserver.log")
    server.start(timeout=config.server_timeout_s)
    info = {"repository": str(repository), "start_seconds": server.start_seconds, "log": str(server.log_path),
            "tritonserver": server_version(server.http_url), "binary": server.binary.kind, "tasks": {}}
    rows: list[Row] = []
    try:
        for item in inputs:
            task = item.task
            facts: dict = {}
            with Client(task, server.grpc_url) as client:
                client.check_ready()
                # The first request after ready: the cost a cold server puts on its first caller.
                t0 = time.perf_counter()
                client.infer(item.texts[:1])
                facts["cold_ms"] = 1000 * (time.perf_counter() - t0)
                check = item.texts[:config.check_texts]
                served = decode_outputs(task, client.infer_all(check, batch_size=8, progress=False))
                expected = references[task.name][:len(check)]
                agree = sum(a == b for a, b in zip(served, expected))
                facts["checked"] = len(check)
                facts["agree"] = agree
            info["tasks"][task.name] = facts
            variants = [({"classic": CLASSIC, "fused": FUSED}.get(name, SERVED), 1)]
            if name == "served" and config.client_batch > 1:
                variants.append((SERVED_BATCH, config.client_batch))
            for kind, batch in variants:
                requests = None if config.perf_analyzer else prepare_requests(item.texts, batch)
                for concurrency in config.concurrency:
                    if config.perf_analyzer:
                        row = run_perf_analyzer(config.perf_analyzer, task, server.grpc_url, item.texts, kind, batch,
                                                concurrency, config.duration_s, workdir)
                    else:
                        result = run_load(server.grpc_url, task, requests, concurrency, warmup_s=config.warmup_s,
                                          duration_s=config.duration_s, count=config.requests,
                                          server_pgid=server.pid)
                        row = load_row(task, kind, batch, concurrency, result)
                    rows.append(row)
                    _tick(progress, row)
            if not server.is_running():
                raise ErnieDeployError(f"tritonserver ({name}) exited during the benchmark (log: {server.log_path})")
    finally:
        server.stop()
    return info, rows


# -- the whole run ---------------------------------------------------------------------------------


def build_repository(inputs: list[TaskInputs], out: Path, layout: str = "served") -> Path:
    """The project's own `build`, runtime "python" (what a pip-only machine serves), into `out`; layout
    "served" (the ensemble, defaults), "fused" or "classic"."""
    from ernie_deploy.repository.build import BuildOptions, TaskArtifacts, build

    options = BuildOptions(runtime="python", fused=layout == "fused", classic=layout == "classic")
    entries = [TaskArtifacts(i.task, Path(i.onnx), i.static.vocab_file, i.static.labels) for i in inputs]
    build(entries, out, options)
    return out


def _cells(inputs: list[TaskInputs], config: BenchConfig) -> int:
    paddle = (len(config.batch_sizes) if paddle_available() else 1) if config.paddle else 0
    served = len(config.concurrency) * (2 if config.client_batch > 1 else 1)
    others = len(config.concurrency) * (int(config.classic) + int(config.fused))
    return len(inputs) * ((2 + int(config.int8)) * len(config.batch_sizes) + paddle + served + others)


def run_benchmark(inputs: list[TaskInputs], config: BenchConfig = BenchConfig(), *,
                  repository: str | Path | None = None, classic_repository: str | Path | None = None,
                  workdir: str | Path | None = None, command: str | None = None) -> dict:
    """Measure every row for every task; returns the results (see `save_json`)."""
    import tempfile

    from tqdm import tqdm

    from ernie_deploy.serving.tokenizer import build_tokenizer

    if not inputs:
        raise ErnieDeployError("no task to benchmark")
    started = time.time()
    own_workdir = None
    if workdir is None:
        own_workdir = tempfile.TemporaryDirectory(prefix="ernie-deploy-bench-")
        workdir = own_workdir.name
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    tokenizers = {i.task.name: build_tokenizer(i.static.vocab_file) for i in inputs}
    results = {
        "schema": SCHEMA,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "command": command or shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "machine": machine_info(),
        "versions": package_versions(),
        "settings": {**dataclasses.asdict(config), "ort_threads": os.environ.get("ERNIE_DEPLOY_ORT_THREADS") or
                     "onnxruntime default"},
        "tasks": {i.task.name: {"texts": len(i.texts), "max_seq_len": i.task.max_seq_len} for i in inputs},
        "servers": {},
        "rows": [],
    }
    progress = tqdm(total=_cells(inputs, config), desc="bench", unit="cell", disable=not config.progress)
    try:
        references = {}
        for item in inputs:
            tokenizer = tokenizers[item.task.name]
            references[item.task.name] = reference_predictions(item, item.texts[:config.check_texts])
            int8_onnx = workdir / f"{item.task.name}_int8.onnx" if config.int8 else None
            if int8_onnx:
                from ernie_deploy.export.onnx import quantize_int8

                quantize_int8(item.onnx, int8_onnx)
            results["rows"].extend(asdict_rows(bench_inprocess(item, config, tokenizer, progress, int8_onnx)))
        plans = [("served", repository)]
        if config.fused:
            plans.append(("fused", None))
        if config.classic:
            plans.append(("classic", classic_repository))
        for name, given in plans:
            repo = Path(given) if given else build_repository(inputs, workdir / f"{name}_models", name)
            info, rows = bench_server(repo, name, inputs, config, references, workdir, progress)
            info["built"] = not given
            results["servers"][name] = info
            results["rows"].extend(asdict_rows(rows))
    finally:
        progress.close()
        if own_workdir is not None:
            own_workdir.cleanup()
    results["seconds"] = round(time.time() - started, 1)
    results["machine"]["loadavg_end"] = _loadavg()
    results["ratios"] = compute_ratios(results)
    results["errors"] = total_errors(results)
    return results


def asdict_rows(rows: Iterable[Row]) -> list[dict]:
    return [dataclasses.asdict(r) for r in rows]


def rows_of(results: dict, task: str | None = None, kind: str | None = None) -> list[Row]:
    return [Row.from_dict(r) for r in results.get("rows", [])
            if (task is None or r["task"] == task) and (kind is None or r["kind"] == kind)]


def total_errors(results: dict) -> int:
    return sum(r.errors for r in rows_of(results))


def sanity_notes(results: dict) -> list[str]:
    """Signs that the machine was not quiet: numbers from such a run are not comparable."""
    notes = []
    machine = results.get("machine", {})
    cores = machine.get("usable_cores") or machine.get("cores") or 1
    for when in ("start", "end"):
        load = machine.get(f"loadavg_{when}")
        if load and load[0] > 0.5 * cores:
            notes.append(f"the machine was busy at the {when} of the run (1-minute load average {load[0]:.1f} on "
                         f"{cores} cores); other work shares the cores, so rerun on a quiet machine")
    for ratio in results.get("ratios", []):
        if ratio["key"] == "served_vs_limit" and ratio["value"] and ratio["value"] > 1.05:
            notes.append(f"{ratio['task']}: served throughput is above the in-process limit ({ratio['value']:.2f}x), "
                         "so the in-process rows were slowed by something else on the machine")
    return notes


def mismatches(results: dict) -> list[str]:
    """Served answers that differ from the in-process ONNX ones (the classic layout pads, so float noise can flip a
    near tie there; it is reported, not counted as an error)."""
    found = []
    for name, info in results.get("servers", {}).items():
        for task, facts in info.get("tasks", {}).items():
            if facts.get("agree") != facts.get("checked"):
                found.append(f"{name} {task}: {facts.get('agree')}/{facts.get('checked')} answers equal the "
                             "in-process ONNX answers")
    return found


# -- ratios ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    key: str
    name: str
    op: str  # ">=" or "<="
    threshold: float
    unit: str = ""
    tasks: tuple[str, ...] | None = None  # None: every task


TARGETS = (
    Target("served_vs_limit", "served c{c} / limit+tok (best batch), throughput", ">=", 0.8),
    Target("fused_vs_limit", "fused c{c} / limit+tok (best batch), throughput", ">=", 0.8),
    Target("served_vs_classic", "served c{c} / classic c{c}, throughput", ">=", 3.0),
    Target("tokenize_share", "tokenization share of limit+tok (best batch)", "<=", 0.10, "%"),
    Target("int8_vs_fp32", "INT8 / FP32 in-process (best batch each), throughput", ">=", 1.5),
    Target("p50_c1_ms", "batch-1 p50 latency at concurrency 1", "<=", 5.0, "ms", ("seq_cls",)),
)
READY_TARGET = Target("ready_s", "server ready", "<=", 10.0, "s")


def _at_concurrency(rows: list[Row], wanted: int) -> Row | None:
    """The row at `wanted` concurrency, else the highest measured below it, else the lowest above."""
    rows = [r for r in rows if r.concurrency is not None and r.throughput]
    if not rows:
        return None
    below = [r for r in rows if r.concurrency <= wanted]
    return max(below, key=lambda r: r.concurrency) if below else min(rows, key=lambda r: r.concurrency)


def _ratio(target: Target, value: float | None, task: str | None, detail: str, c: int | None = None) -> dict:
    met = None
    if value is not None and not math.isnan(value):
        met = value >= target.threshold if target.op == ">=" else value <= target.threshold
    return {"key": target.key, "task": task, "name": target.name.format(c=c), "value": value, "op": target.op,
            "threshold": target.threshold, "unit": target.unit, "met": met, "detail": detail}


def compute_ratios(results: dict) -> list[dict]:
    ratios = []
    for task in results.get("tasks", {}):
        served = _at_concurrency(rows_of(results, task, SERVED), REFERENCE_CONCURRENCY)
        fused = _at_concurrency(rows_of(results, task, FUSED), REFERENCE_CONCURRENCY)
        classic = _at_concurrency(rows_of(results, task, CLASSIC), served.concurrency if served else
                                  REFERENCE_CONCURRENCY)
        best_tok = next((r for r in rows_of(results, task, LIMIT_TOK) if r.best), None)
        best = next((r for r in rows_of(results, task, LIMIT) if r.best), None)
        best_int8 = next((r for r in rows_of(results, task, LIMIT_INT8) if r.best), None)
        c = served.concurrency if served else REFERENCE_CONCURRENCY
        for target in TARGETS:
            if target.tasks and task not in target.tasks:
                continue
            value, detail = None, "not measured"
            if target.key == "served_vs_limit" and served and best_tok:
                value = served.throughput / best_tok.throughput
                detail = f"{served.throughput:.1f} / {best_tok.throughput:.1f} seq/s (limit+tok at b{best_tok.batch})"
            elif target.key == "fused_vs_limit" and fused and best_tok:
                value = fused.throughput / best_tok.throughput
                detail = f"{fused.throughput:.1f} / {best_tok.throughput:.1f} seq/s (limit+tok at b{best_tok.batch})"
            elif target.key == "served_vs_classic" and served and classic:
                value = served.throughput / classic.throughput
                detail = f"{served.throughput:.1f} / {classic.throughput:.1f} seq/s"
                if classic.concurrency != served.concurrency:
                    detail += f" (classic at c{classic.concurrency})"
            elif target.key == "int8_vs_fp32" and best_int8 and best:
                value = best_int8.throughput / best.throughput
                detail = (f"{best_int8.throughput:.1f} (b{best_int8.batch}) / {best.throughput:.1f} (b{best.batch}) "
                          "seq/s; accuracy is gated by tests/test_quantize.py")
            elif target.key == "tokenize_share" and best_tok and best_tok.tokenize_share is not None:
                value = best_tok.tokenize_share
                detail = f"at batch {best_tok.batch}"
            elif target.key == "p50_c1_ms":
                one = next((r for r in rows_of(results, task, SERVED) if r.concurrency == 1 and r.p50_ms), None)
                if one:
                    value, detail = one.p50_ms, f"served, 1 text per request, {one.requests} requests"
            ratios.append(_ratio(target, value, task, detail, c))
    served_server = results.get("servers", {}).get("served")
    if served_server:
        ratios.append(_ratio(READY_TARGET, served_server.get("start_seconds"), None,
                             "tritonserver start to /v2/health/ready, every task's models loaded"))
    return ratios


def format_value(ratio: dict) -> str:
    value = ratio["value"]
    if value is None:
        return "n/a"
    if ratio["unit"] == "%":
        return f"{100 * value:.1f}%"
    if ratio["unit"]:
        return f"{value:.2f} {ratio['unit']}"
    return f"{value:.2f}x"


def format_target(ratio: dict) -> str:
    sign = "≥" if ratio["op"] == ">=" else "≤"
    threshold = ratio["threshold"]
    if ratio["unit"] == "%":
        return f"{sign} {100 * threshold:.0f}%"
    return f"{sign} {threshold:g}{(' ' + ratio['unit']) if ratio['unit'] else 'x'}"


def format_met(ratio: dict) -> str:
    return {True: "met", False: "NOT MET", None: "n/a"}[ratio["met"]]


def ratio_table(results: dict) -> str:
    """The ratio table as aligned plain text (what the CLI prints)."""
    lines = [("task", "measure", "value", "target", "", "detail")]
    for r in results.get("ratios", []):
        lines.append((r["task"] or "all", r["name"], format_value(r), format_target(r), format_met(r), r["detail"]))
    widths = [max(len(str(line[i])) for line in lines) for i in range(5)]
    return "\n".join("  ".join(str(v).ljust(w) for v, w in zip(line[:5], widths)) + "  " + line[5]
                     for line in lines).rstrip()


# -- results file ----------------------------------------------------------------------------------


def save_json(results: dict, path: str | Path) -> Path:
    from ernie_deploy.core.files import write_json

    write_json(results, path)
    return Path(path)


def load_json(path: str | Path) -> dict:
    path = Path(path)
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ErnieDeployError(f"cannot read benchmark results {path}: {exc}") from None
    if results.get("schema") != SCHEMA:
        raise ErnieDeployError(f"{path} has results schema {results.get('schema')!r}; this version reads {SCHEMA}",
                               "rerun `ernie-deploy bench`")
    return results


# -- Markdown --------------------------------------------------------------------------------------


def _num(value, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:,.{digits}f}"


def _load_text(load) -> str:
    return " / ".join(f"{v:.2f}" for v in load) if load else "n/a"


def _row_name(row: Row, results: dict) -> str:
    max_len = results.get("tasks", {}).get(row.task, {}).get("max_seq_len", 128)
    return KIND_LABELS.get(row.kind, row.kind).format(batch=row.batch, max_seq_len=max_len)


def render_task_table(results: dict, task: str) -> list[str]:
    lines = ["| row | batch | concurrency | seq/s | p50 ms | p95 ms | p99 ms | client CPU ms/req | "
             "server CPU ms/seq | errors | note |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for kind in KINDS:
        for row in rows_of(results, task, kind):
            best = " **best**" if row.best and kind in (LIMIT, LIMIT_TOK, LIMIT_INT8, PADDLE) else ""
            note = row.note
            if row.tokenize_share is not None:
                note = (note + "; " if note else "") + f"tokenization {100 * row.tokenize_share:.1f}%"
            errors = f"**{row.errors}**" if row.errors else "0"
            lines.append(f"| {_row_name(row, results)}{best} | {row.batch or '–'} | "
                         f"{row.concurrency if row.concurrency is not None else '–'} | {_num(row.throughput)} | "
                         f"{_num(row.p50_ms, 2)} | {_num(row.p95_ms, 2)} | {_num(row.p99_ms, 2)} | "
                         f"{_num(row.client_cpu_ms, 2)} | {_num(row.server_cpu_ms, 2)} | {errors} | {note} |")
    return lines


def render_generated(results: dict, plot_name: str | None = "bench.png") -> str:
    """The generated part of BENCHMARKS.md (without the markers)."""
    machine, versions = results.get("machine", {}), results.get("versions", {})
    servers = results.get("servers", {})
    tritonserver = next((s.get("tritonserver") for s in servers.values() if s.get("tritonserver")), None)
    settings = results.get("settings", {})
    lines = ["<!-- generated by `ernie-deploy bench`: edits between the markers are overwritten -->", ""]
    errors = results.get("errors", total_errors(results))
    if errors:
        lines += [f"> **WARNING: {errors} requests failed in this run; its numbers are not valid.**", ""]
    for problem in mismatches(results):
        lines += [f"> **Check:** {problem}.", ""]
    for note in sanity_notes(results):
        lines += [f"> **Note:** {note}.", ""]
    lines += [
        "## Run",
        "",
        f"- date: {results.get('date')} (took {results.get('seconds', 0):.0f} s)",
        f"- command: `{results.get('command')}`",
        f"- machine: {machine.get('cpu')}, {machine.get('cores')} cores ({machine.get('usable_cores')} usable), "
        f"{machine.get('memory_gib')} GiB, {machine.get('platform')}, Python {machine.get('python')}; "
        f"load average at start {_load_text(machine.get('loadavg_start'))}, at end {_load_text(machine.get('loadavg_end'))}",
        f"- versions: onnxruntime {versions.get('onnxruntime')}, tritonserver {tritonserver}, "
        f"tritonclient {versions.get('tritonclient')}, nvidia-pytriton {versions.get('nvidia-pytriton')}, "
        f"paddlepaddle {versions.get('paddlepaddle')}",
        f"- cells: {settings.get('duration_s')} s per served cell"
        f"{' (' + str(settings.get('requests')) + ' requests)' if settings.get('requests') else ''}, "
        f"{settings.get('inproc_duration_s')} s per in-process cell, {settings.get('warmup_s')} s warm-up each; "
        f"onnxruntime threads: {settings.get('ort_threads')}",
    ]
    for name, info in servers.items():
        colds = ", ".join(f"{t} {facts['cold_ms']:.1f} ms" for t, facts in info.get("tasks", {}).items()
                          if facts.get("cold_ms") is not None)
        source = "built by the benchmark" if info.get("built") else f"`{info.get('repository')}`"
        lines.append(f"- {name} server ({source}): ready in {_num(info.get('start_seconds'), 1)} s; "
                     f"first request to each ensemble: {colds}")
    lines += ["", "## Targets", "", "| task | measure | value | target | | detail |", "|---|---|---:|---|---|---|"]
    for r in results.get("ratios", []):
        met = format_met(r)
        lines.append(f"| {r['task'] or 'all'} | {r['name']} | {format_value(r)} | {format_target(r)} | "
                     f"{'**' + met + '**' if r['met'] is False else met} | {r['detail']} |")
    for task, facts in results.get("tasks", {}).items():
        lines += ["", f"## {task} ({facts.get('texts')} test texts)", ""]
        lines += render_task_table(results, task)
        warm = next((r for r in rows_of(results, task, SERVED) if r.concurrency == 1), None)
        cold = servers.get("served", {}).get("tasks", {}).get(task, {}).get("cold_ms")
        if warm and cold is not None:
            lines += ["", f"Served: first request to the ensemble after ready {cold:.1f} ms; warm p50 at concurrency 1 "
                          f"{_num(warm.p50_ms, 2)} ms."]
    if plot_name:
        lines += ["", f"![throughput and p99 latency against concurrency]({plot_name})"]
    return "\n".join(lines)


def update_markdown(path: str | Path, results: dict, plot_name: str | None = "bench.png") -> Path:
    """Write the generated part between the markers of `path` (creating the file from a template with a
    hand-written Levers section when it does not exist), keeping everything outside them; atomically."""
    path = Path(path)
    text = path.read_text(encoding="utf-8") if path.exists() else MARKDOWN_TEMPLATE
    text = replace_generated(text, render_generated(results, plot_name))
    with atomic_path(path, suffix=".md") as tmp:
        tmp.write_text(text, encoding="utf-8")
    return path


def replace_generated(text: str, generated: str) -> str:
    block = f"{BEGIN_MARK}\n{generated.strip()}\n{END_MARK}"
    begin, end = text.find(BEGIN_MARK), text.find(END_MARK)
    if begin == -1 and end == -1:
        # A hand-written file without markers: the generated part goes first under its title, nothing is lost.
        match = re.search(r"^# .*\n", text, re.MULTILINE)
        at = match.end() if match else 0
        return text[:at] + "\n" + block + "\n\n" + text[at:].lstrip("\n")
    if begin == -1 or end == -1 or end < begin:
        raise ErnieDeployError("BENCHMARKS.md has one bench marker without the other",
                               f"keep both {BEGIN_MARK} and {END_MARK}, in this order, or remove both")
    return text[:begin] + block + text[end + len(END_MARK):]


# -- plot ------------------------------------------------------------------------------------------


def plot(results: dict, path: str | Path) -> Path:
    """Throughput and p99 latency against concurrency per task: served and classic, with the in-process limit
    as a horizontal line. matplotlib is imported here only (Agg: no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(results.get("tasks", {}))
    fig, axes = plt.subplots(len(tasks), 2, figsize=(11, 3.8 * len(tasks)), squeeze=False)
    for (ax_tp, ax_lat), task in zip(axes, tasks):
        series = [(SERVED, "served, 1 text/request", "C0", "o-"), (SERVED_BATCH, "served, {b} texts/request", "C2",
                                                                       "s-"),
                  (FUSED, "fused, 1 text/request", "C1", "d-"),
                  (CLASSIC, "classic (padded, no batching)", "C3", "^-")]
        for kind, label, color, style in series:
            rows = sorted((r for r in rows_of(results, task, kind) if r.throughput), key=lambda r: r.concurrency)
            if not rows:
                continue
            x = [r.concurrency for r in rows]
            name = label.format(b=rows[0].batch)
            ax_tp.plot(x, [r.throughput for r in rows], style, color=color, label=name)
            ax_lat.plot(x, [r.p99_ms for r in rows], style, color=color, label=name)
        best_tok = next((r for r in rows_of(results, task, LIMIT_TOK) if r.best), None)
        best = next((r for r in rows_of(results, task, LIMIT) if r.best), None)
        if best_tok:
            ax_tp.axhline(best_tok.throughput, color="k", linestyle="--",
                          label=f"limit+tok, in-process (b{best_tok.batch})")
        if best:
            ax_tp.axhline(best.throughput, color="0.5", linestyle=":", label=f"limit, no tokenization (b{best.batch})")
        one = next((r for r in rows_of(results, task, LIMIT_TOK) if r.batch == 1 and r.p99_ms), None)
        if one:
            ax_lat.axhline(one.p99_ms, color="k", linestyle="--", label="limit+tok, in-process, batch 1")
        for ax, ylabel in ((ax_tp, "sequences/s"), (ax_lat, "p99 latency (ms)")):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("concurrency (requests in flight)")
            ax.set_ylabel(ylabel)
            ax.set_title(f"{task}: {ylabel.split(' (')[0]}")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7)
            ax.set_ylim(bottom=0)
        concurrency = sorted({r.concurrency for r in rows_of(results, task) if r.concurrency})
        if concurrency:
            for ax in (ax_tp, ax_lat):
                ax.set_xticks(concurrency, [str(c) for c in concurrency])
    machine = results.get("machine", {})
    fig.suptitle(f"ernie-deploy bench, {machine.get('cpu')}, {machine.get('cores')} cores, {results.get('date')}",
                 fontsize=9)
    fig.tight_layout()
    path = Path(path)
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
    return path


# -- CLI -------------------------------------------------------------------------------------------


def _int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise ErnieDeployError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise ErnieDeployError(f"expected positive integers, got {text!r}")
    return values


def add_arguments(p, task_choices: Sequence[str]) -> None:
    """The `bench` subcommand's options (kept here so that cli.py holds one small block)."""
    p.add_argument("--task", action="append", choices=list(task_choices), help="default: every task")
    p.add_argument("--concurrency", help="served cells, comma-separated (default 1,4,8,16; --smoke: 1,2)")
    p.add_argument("--batch-sizes", help="in-process cells (default 1,8,16,32,64; --smoke: 1,8)")
    p.add_argument("--duration", type=float, help="seconds per served cell (default 10; --smoke: 1)")
    p.add_argument("--inproc-duration", type=float, help="seconds per in-process cell (default 5; --smoke: 0.3)")
    p.add_argument("--requests", type=int, help="requests per served cell, instead of --duration")
    p.add_argument("--warmup", type=float, help="seconds of warm-up before each cell (default 1)")
    p.add_argument("--client-batch", type=int, help=f"texts per request of the batched served rows "
                                                     f"(default {CLIENT_BATCH}; 1: no batched rows)")
    p.add_argument("--texts", type=int, help="use only the first N test texts (default: all)")
    p.add_argument("--smoke", action="store_true", help="a tiny run of every row (seconds; timings mean nothing)")
    p.add_argument("--repository", help="serve this repository for the served rows (default: build one from the "
                                        "artifacts into a temporary folder)")
    p.add_argument("--classic-repository", help="serve this repository for the classic rows (default: build one "
                                                "with `build --classic`)")
    p.add_argument("--static", help="default: artifacts/static/<task> (one --task)")
    p.add_argument("--onnx", help="default: artifacts/onnx/<task>/model.onnx (one --task)")
    p.add_argument("--data", help="a split file of texts (default: the task's test split; one --task)")
    p.add_argument("--no-paddle", action="store_true", help="skip the Paddle Inference rows")
    p.add_argument("--no-classic", action="store_true", help="skip the classic rows")
    p.add_argument("--no-fused", action="store_true", help="skip the fused-layout rows")
    p.add_argument("--no-int8", action="store_true", help="skip the INT8 in-process rows")
    p.add_argument("--perf-analyzer", action="store_true",
                   help="drive the served rows with perf_analyzer (must be on PATH) instead of the Python generator")
    p.add_argument("--out", help="folder for bench.json, BENCHMARKS.md and bench.png "
                                 "(default docs/; --smoke: artifacts/bench-smoke/)")
    p.add_argument("--render", metavar="BENCH_JSON", help="only rewrite BENCHMARKS.md and bench.png from a results file")
    p.add_argument("--no-plot", action="store_true", help="write no bench.png (matplotlib not needed)")
    p.add_argument("--levers", action="store_true",
                   help="instead: serve one layout per build option (ragged, buckets, spinning, threads, instances, "
                        "queue delay, fused, classic) and compare their served throughput; writes levers.json")


def config_from_args(args) -> BenchConfig:
    base = BenchConfig.smoke() if args.smoke else BenchConfig()
    changes = {}
    if args.concurrency:
        changes["concurrency"] = _int_list(args.concurrency)
    if args.batch_sizes:
        changes["batch_sizes"] = _int_list(args.batch_sizes)
    for name, attr in (("duration", "duration_s"), ("inproc_duration", "inproc_duration_s"), ("warmup", "warmup_s"),
                       ("requests", "requests"), ("client_batch", "client_batch"), ("texts", "max_texts")):
        if getattr(args, name) is not None:
            changes[attr] = getattr(args, name)
    if args.no_paddle:
        changes["paddle"] = False
    if args.no_classic:
        changes["classic"] = False
    if args.no_fused:
        changes["fused"] = False
    if args.no_int8:
        changes["int8"] = False
    if args.perf_analyzer:
        import shutil

        binary = shutil.which("perf_analyzer")
        if not binary:
            raise ErnieDeployError("--perf-analyzer: perf_analyzer is not on PATH",
                                   "run inside NVIDIA's Triton SDK image (nvcr.io/nvidia/tritonserver:<version>-py3-sdk), "
                                   "or drop --perf-analyzer to use the built-in load generator")
        changes["perf_analyzer"] = binary
    return dataclasses.replace(base, **changes)


def inputs_from_args(args, config: BenchConfig) -> list[TaskInputs]:
    from ernie_deploy.fetch.data import data_dir, read_split_file, split_file
    from ernie_deploy.export.static import StaticModel
    from ernie_deploy.core.layout import artifacts_dir
    from ernie_deploy.core.tasks import TASKS, get_task

    names = args.task or sorted(TASKS)
    if (args.static or args.onnx or args.data) and len(names) != 1:
        raise ErnieDeployError("--static, --onnx and --data name one task's files", "pass exactly one --task with them")
    inputs = []
    for name in names:
        task = get_task(name)
        static = StaticModel.load(args.static or artifacts_dir() / "static" / task.name)
        onnx_path = Path(args.onnx or artifacts_dir() / "onnx" / task.name / "model.onnx")
        if not onnx_path.exists():
            raise ErnieDeployError(f"no ONNX model at {onnx_path}", f"run `ernie-deploy convert --task {task.name}`")
        data = Path(args.data or split_file(data_dir(task.dataset), "test", task.split_format))
        if not data.exists():
            raise ErnieDeployError(f"no test texts at {data}", "run `ernie-deploy fetch-data`")
        texts = [t for t in read_split_file(data)[0] if t.strip()]
        if config.max_texts:
            texts = texts[:config.max_texts]
        inputs.append(TaskInputs(task, onnx_path, static, texts))
    return inputs


def write_outputs(results: dict, out: Path, plot_png: bool = True) -> list[Path]:
    """BENCHMARKS.md (its generated part) and bench.png in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    written = [update_markdown(out / "BENCHMARKS.md", results, "bench.png" if plot_png else None)]
    if plot_png:
        written.append(plot(results, out / "bench.png"))
    return written


def report(results: dict) -> str:
    """What the CLI prints at the end: the best rows per task, the ratio table, and any failure, loudly."""
    lines = []
    for task in results.get("tasks", {}):
        parts = []
        for kind in (LIMIT, LIMIT_TOK, LIMIT_INT8, PADDLE):
            best = next((r for r in rows_of(results, task, kind) if r.best), None)
            if best:
                parts.append(f"{best.label} {best.throughput:.0f} seq/s (b{best.batch})")
        for kind in (SERVED, SERVED_BATCH, FUSED, CLASSIC):
            top = _at_concurrency(rows_of(results, task, kind), REFERENCE_CONCURRENCY)
            if top:
                parts.append(f"{top.label} {top.throughput:.0f} seq/s (c{top.concurrency}, p99 {top.p99_ms:.1f} ms)")
        lines.append(f"{task}: " + "; ".join(parts))
    lines += ["", ratio_table(results)]
    for note in sanity_notes(results):
        lines.append(f"note: {note}")
    errors = results.get("errors", total_errors(results))
    problems = mismatches(results)
    if errors or problems:
        bar = "!" * 78
        lines += ["", bar]
        if errors:
            lines.append(f"!! BENCHMARK HAD {errors} FAILED REQUESTS: its numbers are not valid")
            for row in rows_of(results):
                if row.errors:
                    lines.append(f"!!   {row.task} {row.label} c{row.concurrency}: {row.errors} errors {row.note}")
        for problem in problems:
            lines.append(f"!! {problem}")
        lines.append(bar)
    return "\n".join(lines)


# -- levers: one build option changed at a time, served throughput measured in one run ------------------

# name -> the `ernie-deploy build` options of that layout (everything else at its default).
LEVERS = {
    "default (ragged batching, merged runs, no spinning, warmup)": {},
    "--no-ragged (Triton batches same-length requests only)": {"ragged": False},
    "--no-ragged --pad-to-multiple-of 16 (length buckets)": {"ragged": False, "pad_to_multiple_of": 16},
    "--ort-spinning": {"ort_spinning": True},
    "--ort-threads 1": {"ort_threads": 1},
    "--instances 2 --ort-threads 1": {"instances": 2, "ort_threads": 1},
    "--max-queue-delay-us 1000": {"max_queue_delay_us": 1000},
    "--fused": {"fused": True},
    "--classic": {"classic": True},
}


def measure_levers(inputs: list[TaskInputs], config: BenchConfig, workdir: Path,
                   levers: dict[str, dict] | None = None) -> list[dict]:
    """Build the repository once per lever, serve it alone, and load it at each concurrency (1 text per
    request). Every lever is measured in the same run, so the ratios between them are what to read."""
    from ernie_deploy.repository.build import BuildOptions, TaskArtifacts, build
    from ernie_deploy.server.serve import TritonServer

    out = []
    entries = [TaskArtifacts(i.task, Path(i.onnx), i.static.vocab_file, i.static.labels) for i in inputs]
    for n, (name, options) in enumerate((levers or LEVERS).items()):
        repo = workdir / f"lever{n}"
        build(entries, repo, BuildOptions(runtime="python", **options))
        with TritonServer(repo, http_port=0, grpc_port=0, metrics_port=0, log_file=workdir / f"lever{n}.log") as server:
            for item in inputs:
                requests = prepare_requests(item.texts, 1)
                for concurrency in config.concurrency:
                    result = run_load(server.grpc_url, item.task, requests, concurrency, warmup_s=config.warmup_s,
                                      duration_s=config.duration_s, server_pgid=server.pid)
                    row = load_row(item.task, SERVED, 1, concurrency, result)
                    out.append({"lever": name, "options": options, "task": item.task.name, "concurrency": concurrency,
                                "throughput": row.throughput, "p50_ms": row.p50_ms, "p99_ms": row.p99_ms,
                                "errors": row.errors, "ready_s": server.start_seconds})
                    if config.progress:
                        print(f"{name} | {item.task.name} c{concurrency}: {row.throughput:.1f} seq/s, "
                              f"p50 {row.p50_ms:.2f} ms, p99 {row.p99_ms:.2f} ms, errors {row.errors}")
    return out


def render_levers(rows: list[dict]) -> str:
    """Markdown: one row per lever, throughput and p50 per task and concurrency, and the ratio to the default."""
    cells = sorted({(r["task"], r["concurrency"]) for r in rows})
    base = {(r["task"], r["concurrency"]): r["throughput"] for r in rows if not r["options"]}
    head = " | ".join(f"{t} c{c} seq/s (× default) · p50 ms" for t, c in cells)
    lines = [f"| build options | {head} |", "|---|" + "---:|" * len(cells)]
    for lever in dict.fromkeys(r["lever"] for r in rows):
        got = {(r["task"], r["concurrency"]): r for r in rows if r["lever"] == lever}
        parts = []
        for cell in cells:
            r = got.get(cell)
            ratio = f" ({r['throughput'] / base[cell]:.2f}×)" if r and base.get(cell) else ""
            parts.append(f"{r['throughput']:.0f}{ratio} · {r['p50_ms']:.2f}" if r else "–")
        lines.append(f"| {lever} | " + " | ".join(parts) + " |")
    return "\n".join(lines)


def run_from_args(args) -> dict:
    if args.levers:
        import tempfile

        config = config_from_args(args)
        with tempfile.TemporaryDirectory(prefix="ernie-deploy-levers-") as work:
            rows = measure_levers(inputs_from_args(args, config), config, Path(work))
        out = Path(args.out or ("artifacts/bench-smoke" if args.smoke else "docs"))
        save_json({"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": machine_info(),
                   "command": shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]), "rows": rows}, out / "levers.json")
        print(render_levers(rows))
        if any(r["errors"] for r in rows):
            raise ErnieDeployError("requests failed while measuring the levers", "read the server logs")
        return {"levers": rows}
    if args.render:
        results = load_json(args.render)
        out = Path(args.out or Path(args.render).parent)
        for path in write_outputs(results, out, not args.no_plot):
            print(f"wrote {path}")
        print(report(results))
        return results
    config = config_from_args(args)
    out = Path(args.out or ("artifacts/bench-smoke" if args.smoke else "docs"))
    inputs = inputs_from_args(args, config)
    results = run_benchmark(inputs, config, repository=args.repository, classic_repository=args.classic_repository)
    out.mkdir(parents=True, exist_ok=True)
    written = [save_json(results, out / "bench.json"), *write_outputs(results, out, not args.no_plot)]
    print()
    for path in written:
        print(f"wrote {path}")
    print()
    print(report(results))
    if results["errors"]:
        raise ErnieDeployError(f"{results['errors']} requests failed during the benchmark",
                               "read the server logs named in bench.json; the numbers of this run are not valid")
    return results
