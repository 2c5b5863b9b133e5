"""The monitoring bench's arithmetic: what a scrape carries, the best rounds and the ratios read from them, and its
subcommand. The served part is what `bash scripts/bench.sh monitoring` runs (docs/monitoring.json)."""

from __future__ import annotations

import pytest

from benchmarks.cli import build_parser, normalized
from benchmarks.monitoring_results import model_name, ratios, scrape_cost, texts_counted
from benchmarks.rounds import best

SCRAPE = """# HELP nv_inference_count Number of inferences performed
# TYPE nv_inference_count counter
nv_inference_count{model="mon_default",version="1"} 120
nv_inference_count{model="mon_default_off",version="1"} 118
# HELP ernie_deploy_texts_total Texts answered
# TYPE ernie_deploy_texts_total counter
ernie_deploy_texts_total{model="mon_default",version="1"} 120
# HELP ernie_deploy_profile_total Texts answered, per profile series and bucket
# TYPE ernie_deploy_profile_total counter
ernie_deploy_profile_total{bucket="sports",model="mon_default",series="label",version="1"} 70
ernie_deploy_profile_total{bucket="finance",model="mon_default",series="label",version="1"} 50
ernie_deploy_profile_total{bucket="whole",model="other",series="reading",version="1"} 3
"""


def test_scrape_cost_counts_the_watched_models_series_and_their_help_lines():
    cost = scrape_cost(SCRAPE, ["mon_default"])
    assert cost["with_watch"] == {"bytes": len(SCRAPE.encode()), "series": 6}
    assert cost["watch"]["series"] == 3  # another model's series is not this run's watch
    assert cost["watch"]["per_model"]["mon_default"]["series"] == 3
    assert cost["watch"]["per_family"] == {"ernie_deploy_texts_total": 1, "ernie_deploy_profile_total": 2}
    # without the watch: Triton's own lines and the unwatched model's series, byte for byte
    watch = ("ernie_deploy", "# HELP ernie", "# TYPE ernie")
    kept = [ln for ln in SCRAPE.splitlines(keepends=True) if not ln.startswith(watch)]
    other = [ln for ln in SCRAPE.splitlines(keepends=True) if 'model="other"' in ln]
    assert cost["without_watch"] == {"bytes": len("".join(kept + other).encode()), "series": 3}


def test_texts_counted_reads_one_models_counter():
    assert texts_counted(SCRAPE, "mon_default") == 120
    assert texts_counted(SCRAPE, "mon_default_off") == 0


def _row(variant, concurrency, round_, texts_per_s, p50):
    return {
        "layout": "default",
        "variant": variant,
        "concurrency": concurrency,
        "round": round_,
        "texts_per_s": texts_per_s,
        "p50_ms": p50,
        "p99_ms": 2 * p50,
        "server_cpu_ms_per_text": 1.0,
    }


def test_best_rounds_and_paired_ratios():
    rows = [
        _row("unwatched", 1, 0, 200, 5.0),
        _row("watched", 1, 0, 190, 5.2),
        _row("unwatched", 8, 0, 400, 20),
        _row("watched", 8, 0, 380, 21),
        _row("unwatched", 1, 1, 210, 4.8),  # round 1 is the quieter one for both
        _row("watched", 1, 1, 205, 4.85),
        _row("unwatched", 8, 1, 500, 16),
        _row("watched", 8, 1, 495, 16.1),
    ]
    kept = best(rows)
    assert {r["round"] for r in kept} == {1}
    got = ratios(rows, kept)["default"]
    assert got["c8_throughput_ratio"] == pytest.approx(0.99)
    assert got["c1_p50_added_ms"] == pytest.approx(0.05)
    assert [p["c8_throughput_ratio"] for p in got["paired"]] == pytest.approx([0.95, 0.99])
    assert got["paired_median"]["c1_p50_added_ms"] == pytest.approx((0.2 + 0.05) / 2)


def test_the_subcommand_parses_with_its_layouts():
    args = build_parser().parse_args(normalized(["monitoring", "--layout", "ensemble", "--rounds", "2"]))
    assert (args.command, args.layout, args.rounds, args.no_in_process) == ("monitoring", ["ensemble"], 2, False)
    assert model_name("default", "watched") != model_name("default", "unwatched")
