"""The targets a run is held to. Each Target measures its own value from the results and says whether it is met;
adding a target is adding one entry to TARGETS."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

from benchmarks.config import REFERENCE_CONCURRENCY
from benchmarks.peer.app import HANDLERS
from ernie_deploy.bench.rows import (
    CLASSIC,
    ENSEMBLE,
    LIMIT,
    LIMIT_INT8,
    LIMIT_INT8_OPT,
    LIMIT_OPT,
    LIMIT_TOK,
    PEER,
    SERVED,
    Row,
    at_concurrency,
    best_row,
    rows_of,
)
from ernie_deploy.core.tasks import SEQ_CLS, TASKS

Measured = tuple[float | None, str]  # (value, detail)


@dataclass
class RunRows:
    """The results as the targets read them: one task's rows (task None: the whole run)."""

    results: dict
    task: str | None = None

    def rows(self, kind: str) -> list[Row]:
        return rows_of(self.results, self.task, kind)

    def best(self, kind: str) -> Row | None:
        return best_row(self.results, self.task, kind)

    def at(self, kind: str, concurrency: int = REFERENCE_CONCURRENCY) -> Row | None:
        return at_concurrency(self.rows(kind), concurrency)

    @cached_property
    def served(self) -> Row | None:
        return self.at(SERVED)

    @property
    def concurrency(self) -> int:
        """Where the served rows were read: the reference concurrency, or the nearest measured."""
        return self.served.concurrency if self.served else REFERENCE_CONCURRENCY

    @property
    def sized(self) -> bool:
        return bool(self.results.get("tasks", {}).get(self.task or "", {}).get("shape"))

    @property
    def task_kind(self) -> str | None:
        spec = TASKS.get(self.task or "")
        return spec.kind if spec else None


@dataclass(frozen=True)
class Target:
    key: str
    name: str  # {c}: the concurrency the served rows were read at
    op: str  # ">=" or "<="
    threshold: float
    # The value and how it was obtained; None where the run did not measure it: per task, that is reported
    # as not measured; for the whole run, the target is left out.
    measure: Callable[[RunRows], Measured | None]
    unit: str = ""
    per_task: bool = True  # False: one value for the whole run
    task_kinds: tuple[str, ...] | None = None  # the task kinds it holds for; None: every task
    sizes: bool = True  # whether it holds for the models remade in real shapes (benchmarks.sizes), too
    # A further condition for "met" besides the value against the threshold (e.g. "at equal p99 or better");
    # None where the run cannot tell.
    also: Callable[[RunRows], bool | None] | None = None

    def holds_for(self, rows: RunRows) -> bool:
        if not self.sizes and rows.sized:
            return False
        return self.task_kinds is None or rows.task_kind in self.task_kinds

    def ratio(self, rows: RunRows, measured: Measured | None) -> dict:
        value, detail = measured or (None, "not measured")
        met = None
        if value is not None and not math.isnan(value):
            met = value >= self.threshold if self.op == ">=" else value <= self.threshold
            if met and self.also is not None:
                met = self.also(rows)
        c = rows.concurrency if self.per_task else None
        return {
            "key": self.key,
            "task": rows.task,
            "name": self.name.format(c=c),
            "value": value,
            "op": self.op,
            "threshold": self.threshold,
            "unit": self.unit,
            "met": met,
            "detail": detail,
        }


def _vs_limit(top: Row | None, rows: RunRows) -> Measured | None:
    tok = rows.best(LIMIT_TOK)
    if top and tok:
        return (
            top.throughput / tok.throughput,
            f"{top.throughput:.1f} / {tok.throughput:.1f} seq/s (limit+tok at b{tok.batch})",
        )
    return None


def _served_vs_classic(rows: RunRows) -> Measured | None:
    served, classic = rows.served, rows.at(CLASSIC, rows.concurrency)
    if not (served and classic):
        return None
    detail = f"{served.throughput:.1f} / {classic.throughput:.1f} seq/s"
    if classic.concurrency != served.concurrency:
        detail += f" (classic at c{classic.concurrency})"
    return served.throughput / classic.throughput, detail


def _served_and_peer(rows: RunRows) -> tuple[Row | None, Row | None]:
    return rows.served, rows.at(PEER, rows.concurrency)


def _served_vs_peer(rows: RunRows) -> Measured | None:
    served, peer = _served_and_peer(rows)
    if not (served and peer):
        return None
    detail = (
        f"{served.throughput:.1f} / {peer.throughput:.1f} seq/s; p99 {served.p99_ms:.1f} ms served, "
        f"{peer.p99_ms:.1f} ms SimpleServing"
    )
    if peer.concurrency != served.concurrency:
        detail += f" (SimpleServing at c{peer.concurrency})"
    return served.throughput / peer.throughput, detail


def _p99_no_worse_than_peer(rows: RunRows) -> bool | None:
    served, peer = _served_and_peer(rows)
    if not (served and peer and served.p99_ms is not None and peer.p99_ms is not None):
        return None
    return served.p99_ms <= peer.p99_ms


def _tokenize_share(rows: RunRows) -> Measured | None:
    tok = rows.best(LIMIT_TOK)
    if tok and tok.tokenize_share is not None:
        return tok.tokenize_share, f"at batch {tok.batch}"
    return None


def _best_vs_best(rows: RunRows, kind: str, baseline: str, note: str) -> Measured | None:
    """Throughput of `kind` over `baseline`, each at its best batch size."""
    row, base = rows.best(kind), rows.best(baseline)
    if row and base:
        detail = f"{row.throughput:.1f} (b{row.batch}) / {base.throughput:.1f} (b{base.batch}) seq/s{note}"
        return row.throughput / base.throughput, detail
    return None


def _int8_vs_fp32(rows: RunRows) -> Measured | None:
    return _best_vs_best(rows, LIMIT_INT8, LIMIT, "; accuracy is gated by tests/test_quantize.py")


def _int8_opt_vs_fp32_opt(rows: RunRows) -> Measured | None:
    note = ", both `convert --optimize`; accuracy is gated by tests/test_quantize.py"
    return _best_vs_best(rows, LIMIT_INT8_OPT, LIMIT_OPT, note)


def _served_c1(rows: RunRows) -> Row | None:
    """The served row at concurrency 1 (1 text per request), if it has a p50."""
    return next((r for r in rows.rows(SERVED) if r.concurrency == 1 and r.p50_ms), None)


def _p50_c1(rows: RunRows) -> Measured | None:
    one = _served_c1(rows)
    if one:
        return one.p50_ms, f"served, 1 text per request, {one.requests} requests"
    return None


def _c1_overhead(rows: RunRows) -> Measured | None:
    """What a lone request pays over the same text run in-process: served p50 at concurrency 1 (1 text per request)
    minus the in-process batch-1 p50 with tokenization."""
    served = _served_c1(rows)
    alone = next((r for r in rows.rows(LIMIT_TOK) if r.batch == 1 and r.p50_ms), None)
    if served and alone:
        return served.p50_ms - alone.p50_ms, f"{served.p50_ms:.2f} ms served c1 - {alone.p50_ms:.2f} ms in-process b1"
    return None


def _ready(rows: RunRows) -> Measured | None:
    server = rows.results.get("servers", {}).get("served")
    if server:
        return server.get("start_seconds"), "tritonserver start to /v2/health/ready, every task's models loaded"
    return None


TARGETS = (
    Target(
        "served_vs_limit",
        "served c{c} / limit+tok (best batch), throughput",
        ">=",
        0.8,
        lambda rows: _vs_limit(rows.served, rows),
    ),
    Target(
        "ensemble_vs_limit",
        "ensemble c{c} / limit+tok (best batch), throughput",
        ">=",
        0.8,
        lambda rows: _vs_limit(rows.at(ENSEMBLE), rows),
    ),
    Target("served_vs_classic", "served c{c} / classic c{c}, throughput", ">=", 3.0, _served_vs_classic, sizes=False),
    Target(
        "served_vs_peer",
        "served c{c} / SimpleServing c{c} throughput, at equal p99 or better",
        ">=",
        5.0,
        _served_vs_peer,
        also=_p99_no_worse_than_peer,
        task_kinds=tuple(HANDLERS),  # the kinds SimpleServing has handlers for
        sizes=False,
    ),
    Target(
        "tokenize_share", "tokenization share of limit+tok (best batch)", "<=", 0.10, _tokenize_share, "%", sizes=False
    ),
    Target(
        "int8_vs_fp32",
        "INT8 / FP32 in-process (best batch each), throughput",
        ">=",
        1.5,
        _int8_vs_fp32,
        sizes=False,
    ),
    Target(
        "int8_opt_vs_fp32_opt",
        "INT8 / FP32 of the optimized graph in-process (best batch each), throughput",
        ">=",
        1.5,
        _int8_opt_vs_fp32_opt,
        sizes=False,
    ),
    Target(
        "p50_c1_ms",
        "batch-1 p50 latency at concurrency 1",
        "<=",
        5.0,
        _p50_c1,
        "ms",
        task_kinds=(SEQ_CLS.kind,),  # a target for the classifier's lone request
        sizes=False,
    ),
    Target(
        "c1_overhead_ms",
        "lone request's p50 over in-process batch 1 (with tokenization)",
        "<=",
        1.0,
        _c1_overhead,
        "ms",
    ),
    Target("ready_s", "server ready", "<=", 10.0, _ready, "s", per_task=False),
)


def compute_ratios(results: dict) -> list[dict]:
    """Every target's value per task (the per-task targets), then the whole run's."""
    ratios = []
    for task in results.get("tasks", {}):
        rows = RunRows(results, task)
        ratios += [t.ratio(rows, t.measure(rows)) for t in TARGETS if t.per_task and t.holds_for(rows)]
    run = RunRows(results)
    for target in TARGETS:
        if not target.per_task and (measured := target.measure(run)) is not None:
            ratios.append(target.ratio(run, measured))
    return ratios
