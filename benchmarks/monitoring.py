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
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
import timeit
from dataclasses import replace
from pathlib import Path

import numpy as np

from benchmarks.markdown import format_steps
from ernie_deploy.bench.load import LoadResult, prepare_requests, run_load
from ernie_deploy.bench.machine import run_record
from ernie_deploy.bench.rows import percentile
from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.files import write_json
from ernie_deploy.evaluate.inputs import ModelInputs

# The layouts measured: the row's name -> build's --layout ("auto": the default the build settles on).
LAYOUTS = {"default": "auto", "ensemble": "ensemble"}
WATCHED = ("unwatched", "watched")
CONCURRENCY = (1, 8)
ROUNDS = 3
# c8 throughput watched over unwatched, at least; c1 p50 watched minus unwatched, at most (ms).
TARGETS = {"c8_throughput_ratio": 0.98, "c1_p50_added_ms": 0.1}
MONITOR_PREFIX = "ernie_deploy_"  # the families the watch exports (core.profile, core.shadow)
PUSH_WAIT_S = 2.5  # a count reaches /metrics within about a second (serving/metrics.PUSH_INTERVAL_S); two, and some


def model_name(layout: str, watched: str) -> str:
    return f"mon_{layout}" if watched == "watched" else f"mon_{layout}_off"


def build_models(item: ModelInputs, repo: Path, layouts: tuple[str, ...]) -> None:
    """Each layout's two models into `repo`, from the same artifacts, differing only in `monitor`."""
    from ernie_deploy.repository.build import ModelArtifacts, build
    from ernie_deploy.repository.options import BuildOptions

    for layout in layouts:
        for watched in WATCHED:
            entry = ModelArtifacts(
                replace(item.model, name=model_name(layout, watched)), Path(item.onnx), item.static.vocab_file
            )
            options = BuildOptions(runtime="python", layout=LAYOUTS[layout], monitor=watched == "watched")
            build(entry, repo, options)


def _row(layout: str, watched: str, concurrency: int, got: LoadResult, round_: int) -> dict:
    if got.errors:
        raise ErnieDeployError(
            f"{model_name(layout, watched)} c{concurrency}: requests failed: {got.error_messages}",
            "read the server's log (server.log in the run's folder)",
        )
    latencies_ms = sorted(1000 * s for s in got.latencies_s)
    return {
        "layout": layout,
        "variant": watched,
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


def _print(r: dict) -> None:
    cpu = r["server_cpu_ms_per_text"]
    print(
        f"round {r['round']} {r['layout']:<8} {r['variant']:<9} c{r['concurrency']}: {r['texts_per_s']:8.1f} texts/s, "
        f"p50 {r['p50_ms']:6.3f} ms, p99 {r['p99_ms']:6.2f} ms, server CPU "
        f"{'n/a' if cpu is None else f'{cpu:.2f}'} ms/text, load average {r['load_average']}; per step (queue/compute "
        f"ms) {format_steps(r['steps'])}",
        flush=True,
    )


def best(rows: list[dict]) -> list[dict]:
    """Per (layout, variant, concurrency), the round with the highest throughput."""
    kept: dict = {}
    for r in rows:
        key = (r["layout"], r["variant"], r["concurrency"])
        if key not in kept or r["texts_per_s"] > kept[key]["texts_per_s"]:
            kept[key] = r
    return list(kept.values())


def _compare(by: dict, layout: str) -> dict:
    w1, u1 = by[(layout, "watched", 1)], by[(layout, "unwatched", 1)]
    w8, u8 = by[(layout, "watched", 8)], by[(layout, "unwatched", 8)]
    return {
        "c8_throughput_ratio": w8["texts_per_s"] / u8["texts_per_s"],
        "c1_p50_added_ms": w1["p50_ms"] - u1["p50_ms"],
        "c1_p99_added_ms": w1["p99_ms"] - u1["p99_ms"],
        "c8_server_cpu_ms_per_text_added": None
        if w8["server_cpu_ms_per_text"] is None or u8["server_cpu_ms_per_text"] is None
        else w8["server_cpu_ms_per_text"] - u8["server_cpu_ms_per_text"],
    }


def ratios(rows: list[dict], kept: list[dict]) -> dict:
    """Per layout: the ratios from the best rounds, and the same ratios paired within each round (with their
    median)."""
    out = {}
    by_best = {(r["layout"], r["variant"], r["concurrency"]): r for r in kept}
    for layout in sorted({r["layout"] for r in rows}):
        paired = []
        for round_ in sorted({r["round"] for r in rows}):
            by = {(r["layout"], r["variant"], r["concurrency"]): r for r in rows if r["round"] == round_}
            paired.append({"round": round_, **_compare(by, layout)})
        out[layout] = {
            **_compare(by_best, layout),
            "paired": paired,
            "paired_median": {
                k: statistics.median(p[k] for p in paired) for k in ("c8_throughput_ratio", "c1_p50_added_ms")
            },
        }
    return out


# -- the scrape ------------------------------------------------------------------------------------------------------


def scrape_cost(text: str, watched_models: list[str]) -> dict:
    """What /metrics carries, and what of it the watch adds: its families' samples labelled with a watched model
    (and their HELP and TYPE lines). Without the watch a scrape would be the rest."""
    lines = text.splitlines(keepends=True)
    monitor_families = {ln.split()[2] for ln in lines if ln.startswith("# TYPE " + MONITOR_PREFIX)}
    total = {"bytes": len(text.encode("utf-8")), "series": sum(1 for ln in lines if ln.strip() and ln[0] != "#")}
    watch_bytes, watch_series, per_model = 0, 0, {m: {"series": 0, "bytes": 0} for m in watched_models}
    families: dict[str, int] = {}
    for ln in lines:
        size = len(ln.encode("utf-8"))
        if ln.startswith("#"):
            if len(ln.split()) > 2 and ln.split()[2] in monitor_families:
                watch_bytes += size
            continue
        name = ln.split("{", 1)[0].split(" ", 1)[0]
        if not name.startswith(MONITOR_PREFIX):
            continue
        model = next((m for m in watched_models if f'model="{m}"' in ln), None)
        if model is None:
            continue
        watch_bytes += size
        watch_series += 1
        per_model[model]["series"] += 1
        per_model[model]["bytes"] += size
        families[name] = families.get(name, 0) + 1
    return {
        "with_watch": total,
        "without_watch": {"bytes": total["bytes"] - watch_bytes, "series": total["series"] - watch_series},
        "watch": {"bytes": watch_bytes, "series": watch_series, "per_model": per_model, "per_family": families},
    }


def texts_counted(text: str, model: str) -> float:
    """The watched model's ernie_deploy_texts_total on /metrics (summed over its versions)."""
    total = 0.0
    for ln in text.splitlines():
        if ln.startswith("ernie_deploy_texts_total{") and f'model="{model}"' in ln:
            total += float(ln.rsplit(" ", 1)[1])
    return total


def _get(url: str) -> str:
    from urllib.request import urlopen

    with urlopen(url, timeout=10) as response:
        return response.read().decode("utf-8")


# -- served ----------------------------------------------------------------------------------------------------------


def measure_served(
    item: ModelInputs, workdir: Path, layouts: tuple[str, ...], *, rounds: int, duration_s: float, warmup_s: float
) -> dict:
    from ernie_deploy.repository.served import served_model
    from ernie_deploy.server.process import TritonServer

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
            raise ErnieDeployError(
                f"{name} counted {counted[name]:.0f} texts on /metrics, fewer than the {sent} it answered",
                "the watch is not counting: read server.log and serving/watch.py",
            )
        off = texts_counted(loaded, model_name(layout, "unwatched"))
        if off:
            raise ErnieDeployError(
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

    from ernie_deploy.client.grpc_client import Client

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


# -- in process ------------------------------------------------------------------------------------------------------


def _config(model_dir: Path) -> dict:
    """A model's config.pbtxt as the python backend hands it to a step (its JSON form)."""
    from google.protobuf import json_format, text_format
    from tritonclient.grpc import model_config_pb2 as mc

    message = text_format.Parse((model_dir / "config.pbtxt").read_text(encoding="utf-8"), mc.ModelConfig())
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


class _Answered:
    """A step that has already answered: what the watch wraps when only the watch is timed."""

    def close(self) -> None:
        pass


def time_in_process(item: ModelInputs, repo: Path, *, texts: int = 200, repeat: int = 5) -> dict:
    """The fused step (the default layout's one Triton model) watched and unwatched, one text a call, and the watch's
    own work on the same real inputs and outputs, split into its parts; microseconds per text."""
    from ernie_deploy.core.profile import Profile, chars_bucket
    from ernie_deploy.serving.postprocess_steps import WATCHES
    from ernie_deploy.serving.steps import STEPS
    from ernie_deploy.serving.watch import TEXT_NAMES, Watched, _readings, _text, observe

    steps, configs = {}, {}
    for w in WATCHED:
        folder = repo / model_name("default", w)
        configs[w] = _config(folder)
        steps[w] = STEPS["pipeline"](configs[w], folder / "1")
    name = configs["watched"]["input"][0]["name"]
    requests = [{name: np.array([[t.encode("utf-8")]], dtype=np.object_)} for t in item.texts[:texts]]

    def run_all(step):
        return lambda: [step(r) for r in requests]

    for w in WATCHED:  # warm: onnxruntime's first runs, the tokenizer's caches
        run_all(steps[w])()
    whole = {}
    for _ in range(repeat):  # alternating, so that a disturbance hits both alike
        for w in WATCHED:
            t = timeit.timeit(run_all(steps[w]), number=1) / len(requests)
            whole[w] = min(whole.get(w, float("inf")), 1e6 * t)

    # The watch alone, on what the fused step hands it: the tokenizer's tensors, the logits and the texts (seen),
    # and the postprocess's answers (outputs).
    pipeline = steps["unwatched"]
    seen_outputs = []
    for r in requests:
        item_, texts_ = pipeline.check(r)
        tokens = pipeline.tokenizer.run([item_], pipeline.tokens)[0]
        logits = pipeline.model.run([tuple(tokens[n] for n in pipeline.inputs)])[0]
        seen = {**tokens, **logits, **texts_}
        post = pipeline.post
        outputs = post.run([post.check(seen)], {"label_id", "confidence"})[0]
        seen_outputs.append((seen, outputs))
    folder = repo / model_name("default", "watched")
    kind = item.task.kind
    watch = WATCHES[kind]
    watched = Watched(_Answered(), configs["watched"], folder / "1", watch)
    labels = watched.labels

    profiles = []
    for seen, outputs in seen_outputs:
        profiles.append(Profile())
        observe(profiles[-1], watch, labels, seen, outputs)
    triples = [(s, o, p) for (s, o), p in zip(seen_outputs, profiles)]

    def each(fn):
        return lambda: [fn(s, o, p) for s, o, p in triples]

    def count(s, o, p):  # what _observe does after observe: the batch's counts added to the pushed ones
        added = {watched.keys[key]: n for key, n in p.counts.items()}
        added[watched.texts_key] = p.texts
        watched.counts.add_keys(added)

    def chars(s, o, p):  # observe's length part, as observe computes it
        texts = [np.asarray(s[n]).reshape(1, -1) for n in TEXT_NAMES if s.get(n) is not None]
        return chars_bucket(sum(len(_text(t[0][0])) for t in texts))

    parts = {
        "observe_and_count": lambda s, o, p: watched._observe([(None, s)], [o]),
        "observe": lambda s, o, p: observe(Profile(), watch, labels, s, o),
        "read": lambda s, o, p: watch.read(o, labels),
        "answer_series": lambda s, o, p: [watch.profile(a) for a in watch.read(o, labels)],
        "chars": chars,
        "readings": lambda s, o, p: _readings(s, o, 1),
        "count": count,
    }
    timed: dict[str, float] = {}
    for _ in range(repeat):  # the parts in turn, each its best pass: none is always first on a busy host
        for key, fn in parts.items():
            t = 1e6 * timeit.timeit(each(fn), number=1) / len(seen_outputs)
            timed[key] = min(timed.get(key, float("inf")), t)
    for step in steps.values():
        step.close()
    watched.close()
    return {
        "texts": len(requests),
        "fused_step_us": whole,
        "fused_step_added_us": whole["watched"] - whole["unwatched"],
        "watch_us": timed,
    }


# -- the run ---------------------------------------------------------------------------------------------------------


def render(kept: list[dict], ratio: dict, scrape: dict, inproc: dict | None) -> str:
    lines = [
        "| layout | model | concurrency | texts/s | p50 ms | p99 ms | server CPU ms/text | load average (1/5/15 min) |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in sorted(kept, key=lambda r: (r["layout"] != "default", r["concurrency"], r["variant"] != "unwatched")):
        cpu = r["server_cpu_ms_per_text"]
        lines.append(
            f"| {r['layout']} | {r['variant']} | {r['concurrency']} | {r['texts_per_s']:.1f} | {r['p50_ms']:.2f} | "
            f"{r['p99_ms']:.2f} | {'' if cpu is None else f'{cpu:.2f}'} | "
            f"{' / '.join(f'{v:.2f}' for v in r['load_average'])} |"
        )
    lines.append("")
    for layout, q in ratio.items():
        m = q["paired_median"]
        lines.append(
            f"{layout}: c8 throughput watched/unwatched x{q['c8_throughput_ratio']:.3f} (paired by round, median "
            f"x{m['c8_throughput_ratio']:.3f}; target at least x{TARGETS['c8_throughput_ratio']}), c1 p50 "
            f"{q['c1_p50_added_ms']:+.3f} ms (paired median {m['c1_p50_added_ms']:+.3f} ms; target at most "
            f"+{TARGETS['c1_p50_added_ms']} ms)"
        )
    s = scrape["after_load"]
    per_model = ", ".join(f"{m} {v['series']} series {v['bytes']:,} bytes" for m, v in s["watch"]["per_model"].items())
    lines.append(
        f"/metrics after the load: {s['with_watch']['bytes']:,} bytes, {s['with_watch']['series']} series; without "
        f"the watched models' series {s['without_watch']['bytes']:,} bytes, {s['without_watch']['series']} series; "
        f"per watched model: {per_model}"
    )
    if inproc:
        w = inproc["watch_us"]
        lines.append(
            f"in process (fused step, one text a call, {inproc['texts']} texts): unwatched "
            f"{inproc['fused_step_us']['unwatched']:.1f} us, watched {inproc['fused_step_us']['watched']:.1f} us "
            f"({inproc['fused_step_added_us']:+.1f} us); the watch's work per text: "
            + ", ".join(f"{k} {v:.1f} us" for k, v in w.items())
        )
    return "\n".join(lines)


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
        raise ErnieDeployError("the monitoring bench measures the classifier", "run it with --task seq_cls")
    unknown = [layout for layout in layouts if layout not in LAYOUTS]
    if unknown:
        raise ErnieDeployError(f"no layout {', '.join(unknown)} in the monitoring bench", f"pick among {list(LAYOUTS)}")
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
