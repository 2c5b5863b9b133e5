"""The answers `stats` shows, read from /metrics text built here: live shares beside the reference, the drift score
(Jensen-Shannon, log2), a shadow's agreement and flips, an interval's counts, and what it says where there is
nothing to show. The same on a real server: tests/test_stats.py."""

from __future__ import annotations

import json
import math

import pytest

from ernie_deploy.client.answers import (
    NO_REFERENCE,
    format_answers,
    js_divergence,
    model_dict,
    parse,
    scrape,
)
from ernie_deploy.core.errors import ServerNotReadyError
from ernie_deploy.core.profile import CHAR_BUCKETS, CONFIDENCE_BUCKETS, READINGS
from tests.conftest import serve_bytes


def test_js_of_identical_distributions_is_0():
    assert js_divergence({"a": 3, "b": 1}, {"a": 0.75, "b": 0.25}) == pytest.approx(0.0, abs=1e-12)


def test_js_of_disjoint_distributions_is_1():
    assert js_divergence({"a": 5, "b": 0}, {"a": 0.0, "b": 1.0}) == pytest.approx(1.0)
    assert js_divergence({"a": 1}, {"b": 1}) == pytest.approx(1.0)  # a bucket missing from a side counts 0 there


def test_js_stays_finite_where_a_bucket_is_empty_on_one_side():
    """Where PSI is infinite (a bucket at 0 on one side), JS is finite, within 0..1, and symmetric."""
    p, q = {"a": 0.5, "b": 0.5, "c": 0.0}, {"a": 0.4, "b": 0.4, "c": 0.2}
    js = js_divergence(p, q)
    assert math.isfinite(js) and 0 < js < 1
    assert js == pytest.approx(js_divergence(q, p))
    # by hand: m = (0.45, 0.45, 0.1)
    by_hand = 0.5 * (2 * 0.5 * math.log2(0.5 / 0.45)) + 0.5 * (2 * 0.4 * math.log2(0.4 / 0.45) + 0.2 * math.log2(2))
    assert js == pytest.approx(by_hand)


def test_js_has_nothing_to_compare_without_mass_on_a_side():
    assert js_divergence({"a": 0, "b": 0}, {"a": 0.5, "b": 0.5}) is None
    assert js_divergence({"a": 1}, {}) is None


def _metrics(
    *, live: dict, reference: dict | None, texts: int, model="news", version="1", shadow=None, flips=None
) -> str:
    """A /metrics text as Triton writes custom metrics: every bucket declared, Triton's own series beside."""
    lines = [
        "# HELP nv_inference_request_success Number of successful inference requests, all batch sizes",
        "# TYPE nv_inference_request_success counter",
        f'nv_inference_request_success{{model="{model}",version="1"}} 12',
        "# HELP ernie_deploy_profile_total answers per series and bucket",
        "# TYPE ernie_deploy_profile_total counter",
    ]
    for series, counts in live.items():
        for bucket, n in counts.items():
            lines.append(
                f'ernie_deploy_profile_total{{bucket="{bucket}",model="{model}",series="{series}",'
                f'version="{version}"}} {n}'
            )
    lines += [
        "# HELP ernie_deploy_texts_total texts answered",
        "# TYPE ernie_deploy_texts_total counter",
        f'ernie_deploy_texts_total{{model="{model}",version="{version}"}} {texts}',
    ]
    if reference is not None:
        lines += ["# HELP ernie_deploy_reference_share reference", "# TYPE ernie_deploy_reference_share gauge"]
        for series, shares in reference.items():
            for bucket, share in shares.items():
                lines.append(
                    f'ernie_deploy_reference_share{{bucket="{bucket}",model="{model}",series="{series}",'
                    f'version="{version}"}} {share}'
                )
    if shadow is not None:
        lines += ["# HELP ernie_deploy_shadow_total shadow", "# TYPE ernie_deploy_shadow_total counter"]
        for outcome, n in shadow.items():
            lines.append(
                f'ernie_deploy_shadow_total{{candidate="2",model="{model}",outcome="{outcome}",'
                f'version="{version}"}} {n}'
            )
        lines += ["# HELP ernie_deploy_shadow_flips_total flips", "# TYPE ernie_deploy_shadow_flips_total counter"]
        for (s, c), n in (flips or {}).items():
            lines.append(
                f'ernie_deploy_shadow_flips_total{{candidate="2",candidate_label="{c}",model="{model}",'
                f'serving_label="{s}",version="{version}"}} {n}'
            )
        for part, value in (("sum", 0.6), ("count", 150)):
            lines += [
                f"# HELP ernie_deploy_shadow_candidate_seconds_{part} latency",
                f"# TYPE ernie_deploy_shadow_candidate_seconds_{part} counter",
                f'ernie_deploy_shadow_candidate_seconds_{part}{{candidate="2",model="{model}",'
                f'version="{version}"}} {value}',
            ]
    return "\n".join(lines) + "\n"


LIVE = {
    "label": {"体育": 30, "财经": 10, "房产": 0},
    "confidence": {b: (40 if b == "0.95-1" else 0) for b in CONFIDENCE_BUCKETS},
    "chars": {b: (40 if b == "17-32" else 0) for b in CHAR_BUCKETS},
    "reading": {b: (40 if b == "whole" else 0) for b in READINGS},
}
REFERENCE = {
    "label": {"体育": 0.5, "财经": 0.25, "房产": 0.25},
    "confidence": {b: (1.0 if b == "0.95-1" else 0.0) for b in CONFIDENCE_BUCKETS},
    "chars": {b: (0.5 if b in ("17-32", "33-64") else 0.0) for b in CHAR_BUCKETS},
    "reading": {b: (1.0 if b == "whole" else 0.0) for b in READINGS},
}


def test_live_shares_beside_the_reference_with_the_drift_per_series():
    answers = parse(_metrics(live=LIVE, reference=REFERENCE, texts=40))
    assert answers.monitoring and answers.triton_models == {"news"}
    (v,) = answers.of("news")
    assert (v.version, v.texts) == ("1", 40)
    assert v.series() == ["label", "confidence", "chars", "reading"]
    assert v.live_shares("label") == {"体育": 0.75, "财经": 0.25, "房产": 0.0}
    assert v.drift("label") == pytest.approx(js_divergence({"a": 3, "b": 1, "c": 0}, {"a": 2, "b": 1, "c": 1}))
    assert v.drift("confidence") == pytest.approx(0.0) and v.drift("reading") == pytest.approx(0.0)
    assert v.drift("chars") == pytest.approx(js_divergence({"a": 1, "b": 0}, {"a": 1, "b": 1}))  # 0.311
    table = format_answers(answers, ["news"], url="http://m/metrics")
    assert "news v1: 40 texts" in table and NO_REFERENCE not in table
    assert f"drift: label {v.drift('label'):.3f}, confidence 0.000, chars 0.311, reading 0.000" in table
    rows = {line.split()[0]: line.split()[1:] for line in table.splitlines() if line.startswith("    ")}
    assert rows["体育"] == ["30", "75.0%", "50.0%"] and rows["房产"] == ["0", "0.0%", "25.0%"]
    assert rows["33-64"] == ["0", "0.0%", "50.0%"]
    assert "129-256" not in rows  # empty on both sides: left out
    numbers = model_dict(answers, "news", url="http://m/metrics")["versions"]["1"]
    assert numbers["reference"] and numbers["series"]["chars"]["js"] == pytest.approx(0.311278, abs=1e-6)
    assert numbers["series"]["label"]["buckets"]["体育"] == {"count": 30, "share": 0.75, "reference": 0.5}
    assert numbers["shadow"] == {}


def test_a_model_without_reference_says_how_to_make_one():
    answers = parse(_metrics(live=LIVE, reference=None, texts=40))
    table = format_answers(answers, ["news"], url="http://m/metrics")
    assert NO_REFERENCE in table and "  drift:" not in table and "(drift" not in table
    rows = {line.split()[0]: line.split()[1:] for line in table.splitlines() if line.startswith("    ")}
    assert rows["体育"] == ["30", "75.0%", "-"]
    numbers = model_dict(answers, "news", url="u")["versions"]["1"]
    assert not numbers["reference"] and numbers["series"]["label"]["js"] is None
    assert numbers["series"]["label"]["buckets"]["体育"]["reference"] is None


def test_before_any_text_the_shares_are_not_known_and_drift_waits():
    zero = {s: dict.fromkeys(b, 0) for s, b in LIVE.items()}
    answers = parse(_metrics(live=zero, reference=REFERENCE, texts=0))
    table = format_answers(answers, ["news"], url="u")
    assert "news v1: 0 texts" in table and "drift: no text counted yet" in table
    rows = {line.split()[0]: line.split()[1:] for line in table.splitlines() if line.startswith("    ")}
    assert rows["体育"] == ["0", "-", "50.0%"]


def test_a_running_shadow_shows_agreement_outcomes_and_the_most_common_flips():
    shadow = {"agree": 140, "disagree": 10, "failed": 3, "skipped": 2}
    flips = {("体育", "体育"): 100, ("体育", "财经"): 7, ("财经", "体育"): 3, ("财经", "财经"): 40}
    answers = parse(_metrics(live=LIVE, reference=REFERENCE, texts=40, shadow=shadow, flips=flips))
    (v,) = answers.of("news")
    sh = v.shadows["2"]
    assert (sh.agree + sh.disagree, sh.agreement) == (150, pytest.approx(140 / 150))
    assert sh.off_diagonal() == [("体育", "财经", 7), ("财经", "体育", 3)]  # the diagonal is no flip
    assert sh.latency_sum / sh.latency_count == pytest.approx(0.004)  # read whatever the parser suffixed
    table = format_answers(answers, ["news"], url="u")
    assert (
        "shadow of v2: agreement 93.3% (140 agree, 10 disagree); 153 compared, 3 failed, 2 skipped; "
        "candidate 4.0 ms mean per request" in table
    )
    assert "most common flips (serving -> candidate): 体育 -> 财经 (7), 财经 -> 体育 (3)" in table
    numbers = model_dict(answers, "news", url="u")["versions"]["1"]["shadow"]["2"]
    assert numbers["compared"] == 153 and numbers["failed"] == 3 and numbers["flips"][0] == ["体育", "财经", 7]
    assert numbers["candidate_mean_ms"] == pytest.approx(4.0)
    # Series at zero (a plan set, nothing mirrored yet) are no running shadow.
    idle = parse(_metrics(live=LIVE, reference=REFERENCE, texts=40, shadow=dict.fromkeys(shadow, 0)))
    assert "shadow" not in format_answers(idle, ["news"], url="u")


def test_an_interval_shows_the_counts_between_two_scrapes():
    before = parse(_metrics(live=LIVE, reference=REFERENCE, texts=40, shadow={"agree": 5, "disagree": 5}))
    later = {**LIVE, "label": {"体育": 30, "财经": 20, "房产": 10}}
    after = parse(_metrics(live=later, reference=REFERENCE, texts=60, shadow={"agree": 15, "disagree": 5}))
    (v,) = after.since(before).of("news")
    assert v.texts == 20 and v.live["label"] == {"体育": 0, "财经": 10, "房产": 10}
    assert v.shadows["2"].agreement == 1.0
    assert v.reference == REFERENCE  # the reference is the gauges' now
    assert "over the interval" in format_answers(after.since(before), ["news"], url="u", since_load=False)
    # A counter that went down was reset (the model reloaded): what it holds now is all new.
    (reloaded,) = before.since(after).of("news")
    assert reloaded.texts == 40


def test_monitoring_off_and_a_model_without_series_say_so():
    triton_only = (
        '# TYPE nv_inference_request_success counter\nnv_inference_request_success{model="news",version="1"} 3\n'
    )
    off = parse(triton_only)
    assert not off.monitoring
    assert "monitoring is off on this server" in format_answers(off, ["news"], url="u")
    assert model_dict(off, "news", url="u")["monitoring"] is False
    one = parse(_metrics(live=LIVE, reference=REFERENCE, texts=40))
    table = format_answers(one, ["news", "ner"], url="u")
    assert "ner: no answer series (built with --no-monitor" in table and "--runtime python" in table


def test_versions_and_models_apart():
    text = _metrics(live=LIVE, reference=REFERENCE, texts=40) + _metrics(
        live=LIVE, reference=None, texts=5, version="2"
    ).replace("nv_inference_request_success", "nv_other")
    answers = parse(text)
    assert [v.version for v in answers.of("news")] == ["1", "2"]
    table = format_answers(answers, ["news"], url="u")
    assert table.index("news v1: 40 texts") < table.index("news v2: 5 texts")


def test_scrape_reads_metrics_over_http_and_names_what_is_wrong():
    httpd = serve_bytes(_metrics(live=LIVE, reference=REFERENCE, texts=40).encode())
    try:
        assert scrape(f"http://127.0.0.1:{httpd.server_port}/metrics").of("news")[0].texts == 40
    finally:
        httpd.shutdown()
    httpd = serve_bytes(json.dumps({"error": "x"}).encode() + b"\n{ not metrics")
    try:
        with pytest.raises(ServerNotReadyError, match="other than Prometheus' text format") as info:
            scrape(f"http://127.0.0.1:{httpd.server_port}/metrics")
        assert "--metrics-url" in info.value.fix
    finally:
        httpd.shutdown()
        httpd.server_close()
    port = httpd.server_port  # closed: nothing listens there now
    with pytest.raises(ServerNotReadyError, match="could not read the server's metrics"):
        scrape(f"http://127.0.0.1:{port}/metrics", timeout=2)
