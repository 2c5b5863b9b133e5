"""`bash scripts/bench.sh cache`: what Triton's response cache (`build --cache`) gives and costs, on one server in
one run.

The model is built twice in one repository, as the default build without the cache and with it, and both are
driven the same way (closed loop, the same concurrency, each request one text, every request sent once). Two
workloads over the test titles, each on a cold cache and on texts of its own:
- repeated texts: a Zipf draw (s = ZIPF_S) over half of the titles, as traffic where some texts come back often
  (the hit rate is the share of requests answered from the cache);
- unique texts: each title of the other half once, so the cache never hits and shows only what it costs (a lookup
  and an insert per request);
- half repeated: every other request one of HOT_TEXTS texts asked again and again, the others new each time, so
  about half the requests hit. Where a miss costs what a request costs without the cache and a hit costs nothing,
  the most a 50% hit rate can give is 1 / 0.5 = 2x the throughput.

"Without" is the default build (`build` with no layout named) and "with" is `build --cache` (the ensemble, the
default layout that caches), so the ratio is what a user gets by adding `--cache`.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

from ernie_deploy.bench.config import BenchConfig
from ernie_deploy.bench.load import prepare_requests, run_load
from ernie_deploy.bench.machine import run_record
from ernie_deploy.bench.rows import percentile
from ernie_deploy.core.errors import BadDataError, FailedRequestsError
from ernie_deploy.core.files import write_json
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.evaluate.inputs import ModelInputs
from ernie_deploy.repository.options import BuildOptions
from ernie_deploy.server.process import TritonServer
from ernie_deploy.server.stats import snapshot

ZIPF_S = 1.1
REQUESTS = 4000  # per model and workload
CONCURRENCY = 8
SEED = 11
MODELS = {"without": False, "with": True}  # the row's label -> build --cache
HOT_TEXTS = 16  # the texts the half-repeated workload asks again


def zipf_draw(texts: list[str], n: int, s: float = ZIPF_S, seed: int = SEED) -> list[str]:
    """`n` texts drawn with replacement, the k-th most frequent with probability proportional to 1 / k**s."""
    weights = 1.0 / np.arange(1, len(texts) + 1) ** s
    picks = np.random.default_rng(seed).choice(len(texts), size=n, p=weights / weights.sum())
    return [texts[i] for i in picks]


def workloads(texts: list[str], n: int) -> dict[str, list[str]]:
    """The two workloads over disjoint halves of the distinct texts. Unique texts past the second half are its
    titles again with a number appended (" 1", " 2", ...): new to the cache, one or two tokens longer."""
    distinct = list(dict.fromkeys(texts))
    half = len(distinct) // 2
    if half < 2:
        raise BadDataError(f"{len(distinct)} distinct texts are too few for the cache bench", "use more texts")
    rest = distinct[half:]
    unique = [t if k == 0 else f"{t} {k}" for k in range(-(-n // len(rest))) for t in rest][:n]
    # texts of its own: the suffixes make them new to a cache the other workloads filled
    hot = [f"{t} 热" for t in rest[:HOT_TEXTS]]
    fresh = [f"{t} 新{k}" for k in range(-(-n // len(rest))) for t in rest][:n]
    mixed = [hot[(i // 2) % len(hot)] if i % 2 == 0 else fresh[i // 2] for i in range(n)]
    return {"repeated": zipf_draw(distinct[:half], n), "unique": unique, "half repeated": mixed}


def _model(item: ModelInputs, label: str) -> ModelSpec:
    """The model built for one row label: the same record under the name `cache_<label>`."""
    return replace(item.model, name=f"cache_{label}")


def _build(item: ModelInputs, repo: Path) -> None:
    from ernie_deploy.repository.build import ModelArtifacts, build

    for label, cache in MODELS.items():
        entry = ModelArtifacts(_model(item, label), Path(item.onnx), item.static.vocab_file)
        build(entry, repo, BuildOptions(runtime="python", layout="auto", response_cache=cache))


def measure_cache(item: ModelInputs, config: BenchConfig, workdir: Path, n: int, concurrency: int) -> list[dict]:
    """One row per workload and model: throughput, latency and the cache's hits and misses."""

    repo = workdir / "models"
    _build(item, repo)
    rows = []
    with TritonServer(repo, http_port=0, grpc_port=0, metrics_port=0, log_file=workdir / "server.log") as srv:
        for workload, texts in workloads(item.texts, n).items():
            for label in MODELS:
                model = _model(item, label)
                before = snapshot(srv.http_url)[model.name]
                requests = prepare_requests(item.task, texts, 1)
                got = run_load(srv.grpc_url, model, requests, concurrency, warmup_s=0, count=len(texts))
                after = snapshot(srv.http_url)[model.name] - before
                if got.errors:
                    raise FailedRequestsError(f"{model.name}: requests failed: {got.error_messages}", "read the log")
                rows.append(_row(workload, label, texts, concurrency, got, after))
                if config.progress:
                    r = rows[-1]
                    print(
                        f"{workload:<8} {label:<7} cache: {r['texts_per_s']:7.1f} texts/s, p50 {r['p50_ms']:.1f} ms, "
                        f"hit rate {r['hit_rate']:.1%}, load average {r['load_average']}"
                    )
    return rows


def _row(workload: str, label: str, texts: list[str], concurrency: int, got, stats) -> dict:
    latencies_ms = sorted(1000 * s for s in got.latencies_s)
    looked_up = stats.cache_hits + stats.cache_misses
    return {
        "workload": workload,
        "cache": label,
        "requests": len(texts),
        "distinct_texts": len(set(texts)),
        "concurrency": concurrency,
        "texts_per_s": got.sequences / got.seconds,
        "p50_ms": percentile(latencies_ms, 50),
        "p99_ms": percentile(latencies_ms, 99),
        "cache_hits": stats.cache_hits,
        "cache_misses": stats.cache_misses,
        "hit_rate": stats.cache_hits / looked_up if looked_up else 0.0,
        "server_cpu_s": got.server_cpu_s,
        "load_average": [round(v, 2) for v in os.getloadavg()],
        "seconds": got.seconds,
    }


def ratios(rows: list[dict]) -> dict[str, dict]:
    """Per workload, with the cache against without: throughput and p50 latency."""
    by = {(r["workload"], r["cache"]): r for r in rows}
    return {
        workload: {
            "throughput_ratio": by[(workload, "with")]["texts_per_s"] / by[(workload, "without")]["texts_per_s"],
            "p50_ratio": by[(workload, "with")]["p50_ms"] / by[(workload, "without")]["p50_ms"],
            "hit_rate": by[(workload, "with")]["hit_rate"],
        }
        for workload in dict.fromkeys(r["workload"] for r in rows)
    }


def render_cache(rows: list[dict]) -> str:
    lines = [
        "| workload | cache | requests | distinct texts | texts/s | p50 ms | p99 ms | hit rate |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['workload']} | {r['cache']} | {r['requests']} | {r['distinct_texts']} | {r['texts_per_s']:.1f} | "
            f"{r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['hit_rate']:.1%} |"
        )
    for workload, r in ratios(rows).items():
        lines.append(
            f"\n{workload}: with the cache / without: throughput x{r['throughput_ratio']:.2f}, p50 latency "
            f"x{r['p50_ratio']:.2f} (hit rate {r['hit_rate']:.1%})"
        )
    return "\n".join(lines)


def run_cache(
    inputs: list[ModelInputs], config: BenchConfig, out: Path, n: int = REQUESTS, concurrency: int = CONCURRENCY
) -> dict:
    """`bash scripts/bench.sh cache`: the first model's rows, printed, and written to `out`/cache.json."""
    item = inputs[0]
    with tempfile.TemporaryDirectory(prefix="ernie-deploy-cache-") as work:
        rows = measure_cache(item, config, Path(work), n, concurrency)
    record = {**run_record(rows), "model": item.model.artifact_name, "zipf_s": ZIPF_S, "ratios": ratios(rows)}
    write_json(record, out / "cache.json")
    print(render_cache(rows))
    return record
