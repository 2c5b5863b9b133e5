"""The monitoring bench's results, read (benchmarks/monitoring.py measures them): the two models of a layout by name,
the watched/unwatched ratios read from each cell's best round (benchmarks.rounds) and paired within each round, what
the server's /metrics carries and what of it the watch adds, and the text printed after a run."""

from __future__ import annotations

import statistics

WATCHED = ("unwatched", "watched")
# c8 throughput watched over unwatched, at least; c1 p50 watched minus unwatched, at most (ms).
TARGETS = {"c8_throughput_ratio": 0.98, "c1_p50_added_ms": 0.1}
MONITOR_PREFIX = "ernie_deploy_"  # the families the watch exports (core.profile, core.shadow)


def model_name(layout: str, watched: str) -> str:
    return f"mon_{layout}" if watched == "watched" else f"mon_{layout}_off"


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
