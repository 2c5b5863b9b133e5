"""The in-process limit of a served python step: its requests handed to it `batch` at a time, as Triton's dynamic
batcher hands them (`Step.run_requests`), back to back, no server (benchmarks/uie.py, benchmarks/embed.py)."""

from __future__ import annotations

import os
import time

from ernie_deploy.bench.rows import percentile


def time_step_calls(step, requests: list, batch: int, duration_s: float, warmup_s: float) -> tuple[int, float, list]:
    """(texts answered, seconds, each call's latency in seconds) of `batch` requests a call, cycling over `requests`,
    after `warmup_s` of the same; a refused request raises its error."""
    calls = [requests[i : i + batch] for i in range(0, len(requests) - batch + 1, batch)]
    k = 0

    def one() -> None:
        nonlocal k
        for out in step.run_requests(calls[k % len(calls)]):
            if not isinstance(out, dict):
                raise out
        k += 1

    until = time.perf_counter() + warmup_s
    while time.perf_counter() < until:
        one()
    latencies, start = [], time.perf_counter()
    while True:
        t0 = time.perf_counter()
        one()
        t1 = time.perf_counter()
        latencies.append(t1 - t0)
        if t1 - start >= duration_s:
            break
    return len(latencies) * batch, t1 - start, latencies


def cell_of(texts: int, seconds: float, latencies_s: list[float]) -> dict:
    """A cell's figures from its (texts, seconds, latencies) (time_step_calls', or a load generator's): texts/s,
    p50, p90 and p99 ms, and the load average at its end."""
    ms = sorted(1000 * s for s in latencies_s)
    return {
        "texts": texts,
        "seconds": seconds,
        "texts_per_s": texts / seconds,
        "p50_ms": percentile(ms, 50),
        "p90_ms": percentile(ms, 90),
        "p99_ms": percentile(ms, 99),
        "load_average": [round(v, 2) for v in os.getloadavg()],
    }
