"""bench.png: throughput and p99 latency against concurrency, per task."""

from __future__ import annotations

from pathlib import Path

from benchmarks.config import REFERENCE_CONCURRENCY
from benchmarks.results import size_facts, sized_models
from ernie_deploy.bench.rows import (
    CLASSIC,
    ENSEMBLE,
    LIMIT,
    LIMIT_TOK,
    PEER,
    PEER_BATCH,
    ROW_KINDS,
    SERVED,
    SERVED_BATCH,
    best_row,
    rows_of,
)
from ernie_deploy.core.files import atomic_path

# Colors and line styles of the kinds plotted against concurrency (their legends are in ROW_KINDS).
STYLES = {
    SERVED: ("C0", "o-"),
    SERVED_BATCH: ("C2", "s-"),
    ENSEMBLE: ("C1", "d-"),
    CLASSIC: ("C3", "^-"),
    PEER: ("C4", "v-"),
    PEER_BATCH: ("C5", "P-"),
}
SIZES_PLOT = "sizes.png"


def plot(results: dict, path: str | Path) -> Path:
    """Throughput and p99 latency against concurrency per task: served and classic, with the in-process limit
    as a horizontal line. matplotlib is imported here only (Agg: no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # The models remade in real shapes have their own figure (plot_sizes).
    tasks = [name for name, facts in results.get("tasks", {}).items() if not facts.get("shape")]
    fig, axes = plt.subplots(len(tasks), 2, figsize=(11, 3.8 * len(tasks)), squeeze=False)
    for (ax_tp, ax_lat), task in zip(axes, tasks):
        for kind in ROW_KINDS.values():
            if kind.legend is None:
                continue
            rows = sorted((r for r in rows_of(results, task, kind.key) if r.throughput), key=lambda r: r.concurrency)
            if not rows:
                continue
            color, style = STYLES[kind.key]
            x = [r.concurrency for r in rows]
            name = kind.legend.format(batch=rows[0].batch)
            ax_tp.plot(x, [r.throughput for r in rows], style, color=color, label=name)
            ax_lat.plot(x, [r.p99_ms for r in rows], style, color=color, label=name)
        best_tok = best_row(results, task, LIMIT_TOK)
        best = best_row(results, task, LIMIT)
        if best_tok:
            ax_tp.axhline(
                best_tok.throughput, color="k", linestyle="--", label=f"limit+tok, in-process (b{best_tok.batch})"
            )
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
    return _save(fig, "ernie-deploy benchmarks", results, path)


def plot_sizes(results: dict, path: str | Path) -> Path:
    """sizes.png: against each model's parameter count, the served layouts' throughput as a share of the
    in-process limit with tokenization (concurrency 8), and what a lone request pays over the in-process batch-1
    run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sized = sized_models(results)
    params = [shape["params"] / 1e6 for _, shape in sized]
    facts = [size_facts(results, name) for name, _ in sized]
    fig, (ax_share, ax_alone) = plt.subplots(1, 2, figsize=(11, 4))
    c = REFERENCE_CONCURRENCY
    for kind, label in (
        (SERVED, f"served c{c}, 1 text/request"),
        (SERVED_BATCH, f"served c{c}, batched requests"),
        (ENSEMBLE, f"ensemble c{c}, 1 text/request"),
    ):
        points = [
            (x, f[kind, c].throughput / f["limit"].throughput)
            for x, f in zip(params, facts)
            if f[kind, c] and f[kind, c].throughput and f["limit"] and f["limit"].throughput
        ]
        if points:
            color, style = STYLES[kind]
            ax_share.plot(*zip(*points), style, color=color, label=label)
    ax_share.axhline(0.8, color="k", linestyle="--", label="target 0.8")
    ax_share.set_ylabel("throughput / in-process limit+tok")
    extra = [(x, f["extra_ms"]) for x, f in zip(params, facts) if f["extra_ms"] is not None]
    if extra:
        ax_alone.plot(*zip(*extra), "o-", color="C0", label="served c1 p50 - in-process b1 p50")
    ax_alone.axhline(1.0, color="k", linestyle="--", label="target 1 ms")
    ax_alone.set_ylabel("lone request: extra ms")
    for ax in (ax_share, ax_alone):
        ax.set_xscale("log")
        ax.set_xlabel("parameters (millions)")
        for x, (_, shape) in zip(params, sized):
            ax.annotate(shape["size"], (x, 0), textcoords="offset points", xytext=(0, 4), fontsize=7, ha="center")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    return _save(fig, "ERNIE 3.0 sizes", results, path)


def _save(fig, title: str, results: dict, path: str | Path) -> Path:
    """Title the figure with the run's machine and date, write it atomically as a PNG and free it."""
    import matplotlib.pyplot as plt

    machine = results.get("machine", {})
    fig.suptitle(f"{title}, {machine.get('cpu')}, {machine.get('cores')} cores, {results.get('date')}", fontsize=9)
    fig.tight_layout()
    path = Path(path)
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
    return path
