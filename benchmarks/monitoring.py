"""`bash scripts/bench.sh monitoring`: what watching a model's answers (serving/watch.py: the answering step counts
each text's answer, length and reading, pushed to Triton's /metrics once a second) costs the clients, measured in one
run on one machine.

The classifier is built twice per layout into one repository from the same artifacts: `mon_<layout>` watched (the
default) and `mon_<layout>_off` with `build --no-monitor`, for the default layout (fused, on the python runtime)
and for the ensemble (where the answering step is the postprocess, which then also takes the texts and `truncated`
from the ensemble). One tritonserver serves all of them. In rounds, each cell (concurrency 1: latency; concurrency
8: throughput; one text a request, the closed loop of bench.load) is driven for the unwatched and the watched model
back to back, in an order that flips every round so that neither always goes first; each cell keeps its best round
(the highest throughput: the least disturbed by other work on a shared host), and the ratios are read from those.
The same ratios paired within each round (the two models measured seconds apart) are recorded beside them, with
their median, since a drifting load moves both members of a pair together.

After the rounds the server's /metrics is read once: its bytes and series, and the part the watch adds (the
ernie_deploy_* families of the watched models), so an operator knows what a scrape carries. Then the watch's own work
(`Watched._observe`: serving.watch.observe and the counts) is timed in this process with timeit on the step's real
inputs and outputs for the test texts, beside the whole fused step watched and unwatched, which says where the
served difference goes.

The results' arithmetic and the printed text are in benchmarks/monitoring_results.py, the in-process timing in
benchmarks/monitoring_in_process.py.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from benchmarks.markdown import format_steps
from benchmarks.monitoring_in_process import time_in_process
from benchmarks.monitoring_results import (
    TARGETS,
    WATCHED,
    model_name,
    ratios,
    render,
    scrape_cost,
    texts_counted,
)
from benchmarks.rounds import best, cell_row
from ernie_deploy.bench.load import LoadResult, prepare_requests, run_load
from ernie_deploy.bench.machine import run_record
from ernie_deploy.client.grpc_client import Client
from ernie_deploy.core.errors import BadOptionsError, BadRepositoryError, FailedRequestsError
from ernie_deploy.core.files import write_json
from ernie_deploy.evaluate.inputs import ModelInputs
from ernie_deploy.repository.options import BuildOptions
from ernie_deploy.server.process import TritonServer

# The layouts measured: the row's name -> build's --layout ("auto": the default the build settles on).
LAYOUTS = {"default": "auto", "ensemble": "ensemble"}
CONCURRENCY = (1, 8)
ROUNDS = 3
PUSH_WAIT_S = 2.5  # a count reaches /metrics within about a second (serving/metrics.PUSH_INTERVAL_S); two, and some


def build_models(item: ModelInputs, repo: Path, layouts: tuple[str, ...]) -> None:
    """Each layout's two models into `repo`, from the same artifacts, differing only in `monitor`."""
    from ernie_deploy.repository.build import ModelArtifacts, build

    for layout in layouts:
        for watched in WATCHED:
            entry = ModelArtifacts(
                replace(item.model, name=model_name(layout, watched)), Path(item.onnx), item.static.vocab_file
            )
            options = BuildOptions(runtime="python", layout=LAYOUTS[layout], monitor=watched == "watched")
            build(entry, repo, options)


def _row(layout: str, watched: str, concurrency: int, got: LoadResult, round_: int) -> dict:
    return cell_row(layout, watched, concurrency, got, round_, "the server's log (server.log in the run's folder)")


def _print(r: dict) -> None:
    cpu = r["server_cpu_ms_per_text"]
    print(
        f"round {r['round']} {r['layout']:<8} {r['variant']:<9} c{r['concurrency']}: {r['texts_per_s']:8.1f} texts/s, "
        f"p50 {r['p50_ms']:6.3f} ms, p99 {r['p99_ms']:6.2f} ms, server CPU "
        f"{'n/a' if cpu is None else f'{cpu:.2f}'} ms/text, load average {r['load_average']}; per step (queue/compute "
        f"ms) {format_steps(r['steps'])}",
        flush=True,
    )


def _get(url: str) -> str:
    from urllib.request import urlopen

    with urlopen(url, timeout=10) as response:
        return response.read().decode("utf-8")


# -- served ----------------------------------------------------------------------------------------------------------


def measure_served(
    item: ModelInputs, workdir: Path, layouts: tuple[str, ...], *, rounds: int, duration_s: float, warmup_s: float
) -> dict:
    from ernie_deploy.repository.served import served_model

    repo = workdir / "models"
    build_models(item, repo, layouts)
    requests = prepare_requests(item.task, item.texts, 1)
    models = {(layout, w): served_model(repo, model_name(layout, w)) for layout in layouts for w in WATCHED}
    watched = [model_name(layout, "watched") for layout in layouts]
    rows: list[dict] = []
    with TritonServer(repo, http_port=0, grpc_port=0, metrics_port=0, log_file=workdir / "server.log") as server:
        time.sleep(PUSH_WAIT_S)  # the counters each watched model declares at load, pushed
        idle = _get(server.metrics_url)
        for round_ in range(rounds):
            order = WATCHED if round_ % 2 == 0 else WATCHED[::-1]
            print(f"round {round_}: load average {[round(v, 2) for v in os.getloadavg()]}", flush=True)
            for layout in layouts:
                for concurrency in CONCURRENCY:
                    for w in order:
                        got = run_load(
                            server.grpc_url,
                            models[(layout, w)],
                            requests,
                            concurrency,
                            warmup_s=warmup_s,
                            duration_s=duration_s,
                            server_pgid=server.pid,
                            stats_url=server.http_url,
                        )
                        rows.append(_row(layout, w, concurrency, got, round_))
                        _print(rows[-1])
        shared = {layout: interleaved(server.grpc_url, models, layout, item.texts) for layout in layouts}
        time.sleep(PUSH_WAIT_S)  # the last counts, pushed
        loaded = _get(server.metrics_url)
    # Every answered text of a watched model is counted (warm-ups included, so at least the measured ones): the
    # proof that the watched rows measured a watch at work, and the unwatched ones none.
    counted = {m: texts_counted(loaded, m) for m in watched}
    for layout in layouts:
        sent = sum(r["texts"] for r in rows if r["layout"] == layout and r["variant"] == "watched")
        name = model_name(layout, "watched")
        if counted[name] < sent:
            raise FailedRequestsError(
                f"{name} counted {counted[name]:.0f} texts on /metrics, fewer than the {sent} it answered",
                "the watch is not counting: read server.log and serving/watch.py",
            )
        off = texts_counted(loaded, model_name(layout, "unwatched"))
        if off:
            raise BadRepositoryError(
                f"{model_name(layout, 'unwatched')} (build --no-monitor) counted {off:.0f} texts",
                "check that `--no-monitor` leaves the `monitor` parameter out of the answering step's config",
            )
    return {
        "rows": rows,
        "interleaved": shared,
        "texts_counted": counted,
        "scrape": {"idle": scrape_cost(idle, watched), "after_load": scrape_cost(loaded, watched)},
    }


def interleaved(url: str, models: dict, layout: str, texts: list, *, pairs: int = 1500, duration_s: float = 20.0):
    """The two models measured at the same moments, so that the host's drift (2x between runs here, 15-30% between
    rounds of one run) hits both alike: at concurrency 1, one request to each in turn (the first of a pair
    alternating), each model's p50 and p99 over `pairs` requests; at concurrency 8, four closed loops on each model at
    once for `duration_s`, each model's texts/s (the two share the cores, so a costlier one completes fewer)."""
    import threading

    records = {w: models[(layout, w)] for w in WATCHED}
    latency: dict[str, list[float]] = {w: [] for w in WATCHED}
    clients = {w: Client(r.task_spec, url, model=r) for w, r in records.items()}
    try:
        for i in range(pairs):
            order = WATCHED if i % 2 == 0 else WATCHED[::-1]
            for w in order:
                start = time.perf_counter()
                clients[w].infer([texts[i % len(texts)]])
                latency[w].append(time.perf_counter() - start)
    finally:
        for client in clients.values():
            client.close()
    done = dict.fromkeys(WATCHED, 0)
    lock, stop = threading.Lock(), threading.Event()

    def loop(w: str, n: int) -> None:
        with Client(records[w].task_spec, url, model=records[w]) as client:
            i = n
            while not stop.is_set():
                client.infer([texts[i % len(texts)]])
                i += 8
                with lock:
                    done[w] += 1

    threads = [threading.Thread(target=loop, args=(WATCHED[n % 2], n)) for n in range(8)]
    for t in threads:
        t.start()
    time.sleep(2.0)  # every loop connected and warm
    with lock:
        warm = dict(done)
    time.sleep(duration_s)
    with lock:
        counted = {w: done[w] - warm[w] for w in WATCHED}
    stop.set()
    for t in threads:
        t.join()

    def pct(values: list[float], q: float) -> float:
        ordered = sorted(values)
        return 1e3 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    out = {
        w: {
            "c1_p50_ms": pct(latency[w], 0.5),
            "c1_p99_ms": pct(latency[w], 0.99),
            "c8_texts_per_s": counted[w] / duration_s,
        }
        for w in WATCHED
    }
    out["c1_p50_added_ms"] = out["watched"]["c1_p50_ms"] - out["unwatched"]["c1_p50_ms"]
    out["c8_ratio"] = out["watched"]["c8_texts_per_s"] / out["unwatched"]["c8_texts_per_s"]
    out["load_average"] = [round(v, 2) for v in os.getloadavg()]
    print(
        f"{layout} interleaved: c1 p50 {out['unwatched']['c1_p50_ms']:.3f} -> {out['watched']['c1_p50_ms']:.3f} ms "
        f"({out['c1_p50_added_ms']:+.3f} ms), c8 sharing the cores {out['unwatched']['c8_texts_per_s']:.1f} vs "
        f"{out['watched']['c8_texts_per_s']:.1f} texts/s (x{out['c8_ratio']:.3f}), load average {out['load_average']}",
        flush=True,
    )
    return out


# -- the run ---------------------------------------------------------------------------------------------------------


def run_monitoring(
    inputs: list[ModelInputs],
    out: Path,
    *,
    layouts: tuple[str, ...] = tuple(LAYOUTS),
    rounds: int = ROUNDS,
    duration_s: float = 10.0,
    warmup_s: float = 1.0,
    in_process: bool = True,
) -> dict:
    """`bash scripts/bench.sh monitoring`: the classifier's rows, printed, and written to `out`/monitoring.json."""
    item = next((i for i in inputs if i.task.name == "seq_cls"), None)
    if item is None:
        raise BadOptionsError("the monitoring bench measures the classifier", "run it with --task seq_cls")
    unknown = [layout for layout in layouts if layout not in LAYOUTS]
    if unknown:
        raise BadOptionsError(f"no layout {', '.join(unknown)} in the monitoring bench", f"pick among {list(LAYOUTS)}")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ernie-deploy-monitoring-") as work:
        measured = measure_served(item, Path(work), layouts, rounds=rounds, duration_s=duration_s, warmup_s=warmup_s)
        inproc = time_in_process(item, Path(work) / "models") if in_process and "default" in layouts else None
    kept = best(measured["rows"])
    ratio = ratios(measured["rows"], kept)
    record = {
        **run_record(measured["rows"]),
        "model": item.model.artifact_name,
        "layouts": {layout: LAYOUTS[layout] for layout in layouts},
        "settings": {"rounds": rounds, "duration_s": duration_s, "warmup_s": warmup_s, "texts": len(item.texts)},
        "best": kept,
        "ratios": ratio,
        "targets": TARGETS,
        "texts_counted": measured["texts_counted"],
        "interleaved": measured["interleaved"],
        "scrape": measured["scrape"],
        "in_process": inproc,
        "seconds": time.perf_counter() - t0,
    }
    out.mkdir(parents=True, exist_ok=True)
    write_json(record, out / "monitoring.json")
    print(render(kept, ratio, measured["scrape"], inproc))
    return record
