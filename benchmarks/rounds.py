"""The rows of the benchmarks that compare variants of a served model in alternating rounds (monitoring, scores-cost):
one closed-loop cell's row, and each cell's best round, from which the ratios are read."""

from __future__ import annotations

import os

from ernie_deploy.bench.load import LoadResult
from ernie_deploy.bench.rows import percentile
from ernie_deploy.core.errors import FailedRequestsError


def cell_row(layout: str, variant: str, concurrency: int, got: LoadResult, round_: int, logs: str) -> dict:
    """One cell's numbers; a cell whose requests failed is refused, naming it and `logs` (where to look)."""
    if got.errors:
        raise FailedRequestsError(
            f"{layout} {variant} c{concurrency}: requests failed: {got.error_messages}", f"read {logs}"
        )
    latencies_ms = sorted(1000 * s for s in got.latencies_s)
    return {
        "layout": layout,
        "variant": variant,
        "concurrency": concurrency,
        "round": round_,
        "requests": len(latencies_ms),
        "texts": got.sequences,
        "texts_per_s": got.sequences / got.seconds,
        "p50_ms": percentile(latencies_ms, 50),
        "p99_ms": percentile(latencies_ms, 99),
        "server_cpu_ms_per_text": None
        if got.server_cpu_s is None or not got.sequences
        else 1000 * got.server_cpu_s / got.sequences,
        "client_cpu_s": got.client_cpu_s,
        "seconds": got.seconds,
        "load_average": [round(v, 2) for v in os.getloadavg()],
        # per Triton model of the layout: queue and compute ms per request, texts per execution (server statistics)
        "steps": got.steps,
    }


def best(rows: list[dict]) -> list[dict]:
    """Per (layout, variant, concurrency), the round with the highest throughput."""
    kept: dict = {}
    for r in rows:
        key = (r["layout"], r["variant"], r["concurrency"])
        if key not in kept or r["texts_per_s"] > kept[key]["texts_per_s"]:
            kept[key] = r
    return list(kept.values())
