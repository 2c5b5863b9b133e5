"""What the Grafana dashboard shows (deployfiles/dashboard.py builds it): its rows of panels as data (ROWS: each
panel's title, unit, description and PromQL queries, made of deployfiles/dashboard_queries.py's expressions), and the
check that every panel queries only metrics Triton or ernie-deploy's steps export.

The "Answers and drift" and "Shadow" rows draw what the answering step of every monitored model exports beside
Triton's own (core/profile.py, core/shadow.py), the drift panel with the window and thresholds of
deploy/prometheus/drift.yml.
"""

from __future__ import annotations

from dataclasses import dataclass

from ernie_deploy.core import profile, shadow
from ernie_deploy.deployfiles import drift_rules
from ernie_deploy.deployfiles.dashboard_queries import (
    CACHED,
    KNOWN_METRICS,
    LEGEND,
    SELECTOR,
    UNCACHED,
    Query,
    beside_reference,
    metric_names,
    needs_series,
    per_request_ms,
    profile_share,
    quantile_ms,
    reference_shares,
    shadow_rate,
    sum_rate,
    watched,
)


@dataclass(frozen=True)
class PanelSpec:
    title: str
    unit: str  # Grafana's unit id
    description: str
    queries: tuple[Query, ...]
    thresholds: tuple[float, ...] = ()  # drawn as dashed lines (an alert's threshold)
    max: float | None = None  # the axis' top (None: Grafana's choice)


_STEPS = (
    "Every Triton model is its own row: in the ensemble layout a request to NAME also runs a tokenizer "
    "(ernie_tokenizer, or ernie_tokenizer_<fingerprint> beside another one), NAME_model and NAME_postprocess, each "
    "with its own series; in the default fused layout one python model does everything."
)

# -- what the models answer (core/profile.py) and the shadow (core/shadow.py) ----------------------------------------

_ANSWER_SERIES = f'series=~"{profile.LABEL}|{profile.ENTITY_TYPE}"'
_CONFIDENCE = f'series="{profile.CONFIDENCE}"'
_LOW = drift_rules.low_buckets()
_CHARS = f'series="{profile.CHARS}"'
_SHADOW_LEGEND = f"{LEGEND} vs v{{{{candidate}}}}"


_W = drift_rules.DEFAULT_WINDOW
_ANSWERS = (
    "Answers and drift",
    (
        PanelSpec(
            "Answers per label: share",
            "percentunit",
            "Each label's share of what a model answered in the interval (a token model: each entity type's share "
            "of the entities it found), and dashed beside it the share in its reference profile (the dev split, or "
            "the file given at build). A label whose line leaves its reference is the stream or the model changing.",
            beside_reference(_ANSWER_SERIES),
            max=1.0,
        ),
        PanelSpec(
            "Low-confidence answers: share vs reference",
            "percentunit",
            "The share of a classifier's answers whose top confidence is under "
            f"{profile.LOW_CONFIDENCE_BUCKETS[-1].split('-')[1]}, live and in its reference; the alert level is the "
            f"reference's plus {drift_rules.LOW_CONFIDENCE_RISE:g} (ErnieDeployConfidenceCollapse, over {_W}).",
            (
                watched(
                    profile_share(_CONFIDENCE, "model, version", _LOW),
                    f"{LEGEND} live",
                    needs_series(profile.PROFILE_METRIC, _CONFIDENCE),
                ),
                watched(
                    reference_shares(_CONFIDENCE, "model, version", _LOW),
                    f"{LEGEND} reference",
                    needs_series(profile.REFERENCE_METRIC, _CONFIDENCE),
                ),
                watched(
                    f"{reference_shares(_CONFIDENCE, 'model, version', _LOW)} + {drift_rules.LOW_CONFIDENCE_RISE:g}",
                    f"{LEGEND} alert level",
                    needs_series(profile.REFERENCE_METRIC, _CONFIDENCE),
                ),
            ),
            max=1.0,
        ),
        PanelSpec(
            "Text length: share per bucket of characters",
            "percentunit",
            "How long the texts sent are (both texts of a pair together), as each length bucket's share, and dashed "
            "the reference's. News titles fill 17-32; sentences and documents land further right.",
            beside_reference(_CHARS),
            max=1.0,
        ),
        PanelSpec(
            f"Drift from the reference: Jensen-Shannon divergence per series, over {_W}",
            "none",
            f"Per series, how far the last {_W}'s shares are from the reference's: 0 the same, 1 nothing in common "
            f"(log base 2), as deploy/prometheus/drift.yml records it. Its alerts fire above the dashed line "
            f"({drift_rules.ANSWER_JS:g}, for the answers: label, entity_type, labels_per_text, and "
            f"{drift_rules.CHARS_JS:g} for chars) held {drift_rules.DEFAULT_FOR} with at least "
            f"{drift_rules.DEFAULT_MIN_TEXTS} texts in the window; sampling noise reads about 0.02 at 200 texts.",
            (
                watched(
                    drift_rules.js_divergence(
                        drift_rules.live_share(_W, SELECTOR), drift_rules.reference_share(SELECTOR)
                    ),
                    f"{LEGEND} {{{{series}}}}",
                    profile.REFERENCE_METRIC,
                ),
            ),
            thresholds=tuple(sorted({drift_rules.ANSWER_JS, drift_rules.CHARS_JS})),
            max=1.0,
        ),
        PanelSpec(
            "Texts answered per second",
            "short",
            f"Texts (not requests: a request carries a batch) a monitored model answered; the drift alerts wait for "
            f"{drift_rules.DEFAULT_MIN_TEXTS} in {_W}.",
            (
                watched(
                    f"sum by (model, version) (rate({profile.TEXTS_METRIC}{{{SELECTOR}}}[$__rate_interval]))",
                    LEGEND,
                    profile.TEXTS_METRIC,
                ),
            ),
        ),
    ),
)

_SHADOW = (
    "Shadow",
    (
        PanelSpec(
            "Shadow agreement",
            "percentunit",
            "While a candidate version is shadowed (`rollout --shadow`): the share of mirrored texts on which it "
            "answered as the serving version did, of those both answered.",
            (
                watched(
                    f"{shadow_rate('agree')}\n/\n({shadow_rate('agree|disagree')} > 0)",
                    _SHADOW_LEGEND,
                    shadow.SHADOW_METRIC,
                ),
            ),
            max=1.0,
        ),
        PanelSpec(
            "Shadow failed and skipped per second",
            "short",
            "Mirrored texts the candidate failed (an error, a timeout, the model gone) and texts not mirrored because "
            "its queue was full (the candidate falls behind): either makes the agreement less telling.",
            (
                watched(
                    shadow_rate("failed|skipped", "model, version, candidate, outcome"),
                    f"{_SHADOW_LEGEND} {{{{outcome}}}}",
                    shadow.SHADOW_METRIC,
                ),
            ),
        ),
        PanelSpec(
            "Shadow candidate latency p95",
            "s",
            "The candidate's time per mirrored request, p95 over the interval (from its histogram), summed over the "
            "servers; compare with the serving version's end-to-end latency above.",
            (
                watched(
                    "histogram_quantile(0.95, sum by (model, version, candidate, le) "
                    f"(rate({shadow.SHADOW_LATENCY_METRIC}_bucket{{{SELECTOR}}}[$__rate_interval])))",
                    f"{_SHADOW_LEGEND} p95",
                    shadow.SHADOW_METRIC,
                ),
            ),
        ),
    ),
)

ROWS: tuple[tuple[str, tuple[PanelSpec, ...]], ...] = (
    (
        "Traffic",
        (
            PanelSpec(
                "Requests per second",
                "reqps",
                "Successful requests (answers from the response cache included). " + _STEPS,
                (Query(sum_rate("nv_inference_request_success"), LEGEND),),
            ),
            PanelSpec(
                "Failures per second, by reason",
                "reqps",
                "Failed requests by Triton's reason: BACKEND (the model itself failed, e.g. a dead python stub), OTHER "
                "(a bad request, or a failed step seen from its ensemble), REJECTED, CANCELED. Triton 2.51 counts each "
                "failed request of an ensemble twice.",
                (
                    Query(
                        sum_rate("nv_inference_request_failure", by="model, version, reason"),
                        f"{LEGEND} {{{{reason}}}}",
                    ),
                ),
            ),
            PanelSpec(
                "Refusals per second",
                "reqps",
                "Requests refused rather than served: REJECTED (a queue timeout, build --queue-timeout-us, at the step "
                "and at its ensemble; a full queue, --max-queue-size, at the ensemble only, and a fused model does not "
                "count those: only its clients see them) and CANCELED (the client gave up).",
                (
                    Query(
                        sum_rate(
                            "nv_inference_request_failure", 'reason=~"REJECTED|CANCELED"', "model, version, reason"
                        ),
                        f"{LEGEND} {{{{reason}}}}",
                    ),
                ),
            ),
            PanelSpec(
                "Requests in flight",
                "short",
                "Requests a model has received and not yet answered (queued or running), summed over the servers.",
                (Query(f"sum by (model, version) (nv_inference_pending_request_count{{{SELECTOR}}})", LEGEND),),
            ),
        ),
    ),
    (
        "Latency",
        (
            PanelSpec(
                "End to end: p50, p99 and mean",
                "ms",
                "From the request's arrival to its answer, as each model sees it: for an ensemble or a fused model the "
                "client's wait less the network, for a step its own part. Quantiles are the server's summaries of "
                "the last minute's requests (the slowest server's; a gap after a minute without any); Triton 2.51 has "
                "none for a model with the response cache, which shows the mean alone. " + _STEPS,
                (
                    quantile_ms("nv_inference_request_summary_us", "0.5", UNCACHED),
                    quantile_ms("nv_inference_request_summary_us", "0.99", UNCACHED),
                    Query(per_request_ms("nv_inference_request_duration_us"), f"{LEGEND} mean"),
                ),
            ),
            PanelSpec(
                "Per step: compute p50 and p99",
                "ms",
                "Time each Triton model spent running a request (the compute, without its queue): with the ensemble "
                "layout, which step the time goes to. " + _STEPS,
                (
                    quantile_ms("nv_inference_compute_infer_summary_us", "0.5"),
                    quantile_ms("nv_inference_compute_infer_summary_us", "0.99"),
                ),
            ),
            PanelSpec(
                "Queue time: mean and p99",
                "ms",
                "Time requests waited in a model's queue before running. An ensemble's own queue time is 0: the "
                "waiting happens in its steps.",
                (
                    Query(per_request_ms("nv_inference_queue_duration_us"), f"{LEGEND} mean"),
                    quantile_ms("nv_inference_queue_summary_us", "0.99"),
                ),
            ),
            PanelSpec(
                "Compute input, infer, output: mean per request",
                "ms",
                "The compute split as `ernie-deploy stats` shows it: input and output are a python step's "
                "shared-memory hops, infer its own work.",
                tuple(
                    Query(per_request_ms(f"nv_inference_compute_{phase}_duration_us"), f"{LEGEND} {phase}")
                    for phase in ("input", "infer", "output")
                ),
            ),
        ),
    ),
    (
        "Response cache",
        (
            PanelSpec(
                "Cache hits and misses per second",
                "reqps",
                "Requests answered from Triton's response cache and those looked up and not found, for the models "
                "built with `build --cache` (no other model has these series). A hit counts as a successful request "
                "whose steps never ran.",
                (
                    Query(sum_rate("nv_cache_num_hits_per_model"), f"{LEGEND} hits", CACHED),
                    Query(sum_rate("nv_cache_num_misses_per_model"), f"{LEGEND} misses", CACHED),
                ),
            ),
            PanelSpec(
                "Cache hit ratio",
                "percentunit",
                "Hits over lookups in the window, for the models built with `build --cache`.",
                (
                    Query(
                        f"{sum_rate('nv_cache_num_hits_per_model')} / ({sum_rate('nv_cache_num_hits_per_model')} "
                        f"+ {sum_rate('nv_cache_num_misses_per_model')})",
                        LEGEND,
                        CACHED,
                    ),
                ),
            ),
        ),
    ),
    _ANSWERS,
    _SHADOW,
)


def panels(rows=ROWS) -> list[PanelSpec]:
    return [panel for _, row in rows for panel in row]


def unknown_metrics(rows=ROWS) -> dict[str, set[str]]:
    """{panel title: metric names it queries that neither Triton 2.51 nor ernie-deploy's steps export} (empty when
    all are real)."""
    found = {}
    for panel in panels(rows):
        unknown = set().union(*(metric_names(q.expr) for q in panel.queries)) - KNOWN_METRICS
        if unknown:
            found[panel.title] = unknown
    return found
