"""The rows of a benchmark: what each kind of row measures, one measured cell (Row), and the statistics and
lookups over them. `ernie-deploy bench` measures the limit and served rows of a user's model; the repository's own
benchmarks (benchmarks/, `bash scripts/bench.sh`) add the others to the same results file.

Per task, on the task's test texts, these rows are measured (throughput in sequences/s, latency in ms):

    limit          the same ONNX model in-process (onnxruntime), every batch size, tokenization excluded
    limit+tok      the same, tokenizing each batch first (what a server has to do too)
    served         the default build over gRPC on a real tritonserver, asyncio load, one text per request
    served bN      the same with N texts per request
    limit int8, limit opt, limit int8 opt, paddle, ensemble, classic, peer, peer bN
                   benchmarks/ only: the INT8 and optimized graphs, Paddle Inference, the other layouts and
                   PaddleNLP SimpleServing (benchmarks/peer)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from ernie_deploy.core.errors import BadDataError

# Row kinds, in the order the tables show them.
(
    LIMIT,
    LIMIT_TOK,
    LIMIT_INT8,
    LIMIT_OPT,
    LIMIT_INT8_OPT,
    PADDLE,
    SERVED,
    SERVED_BATCH,
    ENSEMBLE,
    CLASSIC,
    PEER,
    PEER_BATCH,
) = (
    "limit",
    "limit_tok",
    "limit_int8",
    "limit_opt",
    "limit_int8_opt",
    "paddle",
    "served",
    "served_batch",
    "ensemble",
    "classic",
    "peer",
    "peer_batch",
)


@dataclass(frozen=True)
class Kind:
    """A kind of row and its names. In the names, {batch} is the row's texts per request and {max_seq_len} the
    length the classic layout pads to."""

    key: str
    label: str  # short: the console, the progress bar
    title: str  # long: the rows of BENCHMARKS.md
    legend: str | None = None  # bench.png, against concurrency; None: not plotted
    layout: str | None = None  # the served layout (`build`, or "peer") measured; None: measured in-process
    batched: bool = False  # served with the client batch per request (only when that is above 1)

    @property
    def inprocess(self) -> bool:
        return self.layout is None


ROW_KINDS = {
    kind.key: kind
    for kind in (
        Kind(LIMIT, "limit", "limit: onnxruntime in-process, tokenization excluded"),
        Kind(LIMIT_TOK, "limit+tok", "limit: onnxruntime in-process, tokenization included"),
        Kind(
            LIMIT_INT8,
            "limit int8",
            "limit, INT8 (`convert --quantize int8`): onnxruntime in-process, tokenization excluded",
        ),
        Kind(
            LIMIT_OPT,
            "limit opt",
            "limit, optimized (`convert --optimize`: fused attention): onnxruntime in-process, tokenization excluded",
        ),
        Kind(
            LIMIT_INT8_OPT,
            "limit int8 opt",
            "limit, optimized then INT8 (`convert --optimize --quantize int8`): onnxruntime in-process, tokenization "
            "excluded",
        ),
        Kind(PADDLE, "paddle", "paddle: Paddle Inference in-process, tokenization excluded"),
        Kind(
            SERVED,
            "served",
            "served: the default build (`build`, no layout named) over gRPC, 1 text per request",
            "served, 1 text/request",
            "served",
        ),
        Kind(
            SERVED_BATCH,
            "served b{batch}",
            "served: the default build over gRPC, {batch} texts per request",
            "served, {batch} texts/request",
            "served",
            batched=True,
        ),
        Kind(
            ENSEMBLE,
            "ensemble",
            "served, ensemble (`--layout ensemble`: tokenizer, model, postprocess as three Triton models) over gRPC, "
            "1 text per request",
            "ensemble, 1 text/request",
            "ensemble",
        ),
        Kind(
            CLASSIC,
            "classic",
            "classic: padded to {max_seq_len}, no dynamic batching, 1 instance; 1 text per request",
            "classic (padded, no batching)",
            "classic",
        ),
        Kind(
            PEER,
            "SimpleServing",
            "peer: PaddleNLP SimpleServing (FastAPI, uvicorn, Paddle Inference) over HTTP JSON, 1 text per request",
            "PaddleNLP SimpleServing, 1 text/request",
            "peer",
        ),
        Kind(
            PEER_BATCH,
            "SimpleServing b{batch}",
            "peer: PaddleNLP SimpleServing over HTTP JSON, {batch} texts per request",
            "PaddleNLP SimpleServing, {batch} texts/request",
            "peer",
            batched=True,
        ),
    )
}


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
    tool: str = "python"  # "python" (the built-in load generator) or "perf_analyzer"
    # Served rows: each pipeline step's mean queue and compute ms per request and texts per execution, from the
    # server's statistics over the cell (server.stats.steps_between).
    steps: dict | None = None
    note: str = ""

    @classmethod
    def from_dict(cls, data: dict) -> Row:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    @property
    def label(self) -> str:
        kind = ROW_KINDS.get(self.kind)
        return kind.label.format(batch=self.batch) if kind else self.kind

    def title(self, max_seq_len: int) -> str:
        kind = ROW_KINDS.get(self.kind)
        return kind.title.format(batch=self.batch, max_seq_len=max_seq_len) if kind else self.kind


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
        raise BadDataError("no texts to benchmark on", "check the test split (--data)")
    if len(texts) < batch:
        texts = [texts[i % len(texts)] for i in range(batch)]
    return [list(texts[i : i + batch]) for i in range(0, len(texts) - batch + 1, batch)]


def tick(progress, row: Row) -> None:
    """One cell done on the progress bar (a tqdm, or None), with the row's throughput beside it."""
    if progress is None:
        return
    progress.update(1)
    if row.throughput:
        where = f"b{row.batch}" if row.concurrency is None else f"c{row.concurrency}"
        progress.set_postfix_str(f"{row.task} {row.label} {where}: {row.throughput:.0f} seq/s")


# -- the rows of a results dict --------------------------------------------------------------------


def asdict_rows(rows: Iterable[Row]) -> list[dict]:
    return [dataclasses.asdict(r) for r in rows]


PRIMARY = "primary"


def load_generators(results: dict) -> list[str]:
    """The tools that drove the served rows of a run, the primary (what the ratios, the plot and the main tables
    use) first; ["python"] for runs from before there was a choice."""
    return list(results.get("settings", {}).get("load_generators") or ["python"])


def rows_of(results: dict, task: str | None = None, kind: str | None = None, tool: str | None = PRIMARY) -> list[Row]:
    """The rows of a task and kind. Served rows only of one load generator: `tool`, by default the run's primary
    one; None: every row (in-process rows have no load generator and are always in)."""
    if tool == PRIMARY:
        tool = load_generators(results)[0]
    return [
        Row.from_dict(r)
        for r in results.get("rows", [])
        if (task is None or r["task"] == task)
        and (kind is None or r["kind"] == kind)
        and (tool is None or not driven_by_tools(r["kind"]) or r.get("tool", "python") == tool)
    ]


def driven_by_tools(kind: str) -> bool:
    """Whether rows of `kind` are measured by each of the run's load generators in turn: the Triton layouts. The
    in-process rows have no load generator, and the peer's HTTP rows have their own."""
    layout = ROW_KINDS[kind].layout
    return layout is not None and layout != "peer"


def best_row(results: dict, task: str, kind: str) -> Row | None:
    """The row of `kind` marked best (its best batch size), if any."""
    return next((r for r in rows_of(results, task, kind) if r.best), None)


def at_concurrency(rows: list[Row], wanted: int) -> Row | None:
    """The row at `wanted` concurrency, else the highest measured below it, else the lowest above."""
    rows = [r for r in rows if r.concurrency is not None and r.throughput]
    if not rows:
        return None
    below = [r for r in rows if r.concurrency <= wanted]
    return max(below, key=lambda r: r.concurrency) if below else min(rows, key=lambda r: r.concurrency)


def total_errors(results: dict) -> int:
    return sum(r.errors for r in rows_of(results, tool=None))
