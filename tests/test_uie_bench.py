"""`python -m benchmarks.uie` in miniature: the biased nano UIE through export, convert and build, a real server, every
cell of every schema measured, the served answers checked against the in-process step's, the record written."""

from __future__ import annotations

import json

import pytest


@pytest.mark.integration
def test_the_uie_bench_smoke_runs(tmp_path, capsys):
    from benchmarks.uie import BATCHES, CONCURRENCY, TASKFLOW, run
    from benchmarks.uie_model import FALLBACK_TEXTS, SCHEMAS
    from benchmarks.uie_paddle import TASKFLOW_BATCH
    from ernie_deploy.serving.buckets import MAX_PAD

    out = tmp_path / "uie.json"
    record = run(out, rounds=1, duration_s=0.3, warmup_s=0.1, texts=FALLBACK_TEXTS)
    cells = {(r["schema"], r["way"], r.get("batch"), r.get("concurrency")) for r in record["best"]}
    for key in SCHEMAS:
        assert {(key, "in-process", b, None) for b in BATCHES} <= cells
        assert {(key, "served", None, c) for c in CONCURRENCY} <= cells
        assert (key, TASKFLOW, TASKFLOW_BATCH, None) in cells
        assert record["ratios"][key]["served_c8_over_limit"] > 0
        assert record["ratios"][key]["served_c8_over_taskflow"] > 0
        # Taskflow's engine (Paddle Inference) finds the served spans: the baseline computes what is served.
        agrees = record["facts"][key]["taskflow_agrees"]
        assert agrees["same_spans"] == agrees["texts"] > 0
    for r in record["best"]:
        if r["way"] == "in-process":  # rows in length buckets: each call pads within serving.buckets.MAX_PAD
            assert 1.0 <= r["pad_ratio"] <= MAX_PAD
    assert all(r["texts"] > 0 and r["texts_per_s"] > 0 for r in record["best"])
    facts = record["facts"]
    # The biased heads find spans, and the relation schema runs its second stage on them: the bench times both stages.
    assert facts["3 types"]["rows_per_text"] == 3 * facts["1 type"]["rows_per_text"]
    assert facts["relation"]["rows_per_text"] > 1 and facts["relation"]["relation_spans_per_text"] > 0
    assert facts["relation"]["served_spans_checked"] > 0
    assert json.loads(out.read_text(encoding="utf-8"))["ratios"] == record["ratios"]
    assert "| relation |" in capsys.readouterr().out
