"""What the Grafana dashboard shows (deployfiles/dashboard.py builds it): its rows of panels as data (ROWS: each
panel's PromQL, its unit and which served models it has series for), the template variables every query filters on,
and the metric names Triton exports, which a query must stay within.

What Triton 2.51 exports on its metrics port, read from /metrics of the pip server serving an ensemble with and
without the response cache, a tokenizer-in-model model with it and a fused model, after a few requests each:
- per model and version, every step and every ensemble: the counters and gauge deploy/prometheus/alerts.yml lists
  (nv_inference_request_success, nv_inference_request_failure by `reason`, the cumulative microseconds
  nv_inference_{request,queue,compute_input,compute_infer,compute_output}_duration_us, ...);
- with `--metrics-config=summary_latencies=true` (server.args.server_args), a summary beside each of those five
  durations, nv_inference_<x>_summary_us, with quantile labels "0.5", "0.9", "0.95", "0.99" and "0.999" (plus _count,
  _sum), over the last minute's requests: a p99 read 971 us 55 s after the last request and NaN 65 s after it;
- a model that enables the response cache has no nv_inference_request_summary_us at all (its queue and compute
  summaries and its nv_inference_request_duration_us counter are there), so the end-to-end panel also draws the
  mean from the counters, which every model has;
- for the models that enable the cache, and only for them: nv_cache_num_hits_per_model, nv_cache_num_misses_per_model,
  the microseconds nv_cache_hit_duration_per_model and nv_cache_miss_duration_per_model, and the summaries
  nv_cache_{hit,miss}_summary_per_model; the server's whole cache, without a model label: nv_cache_num_entries,
  nv_cache_util, nv_cache_num_{hits,misses,lookups,evictions}, nv_cache_{lookup,insertion}_duration.

Beside Triton's own, the answering step of every monitored model exports on the same port what it answers (the
series of core/profile.py: profile counts per bucket, texts, the reference's shares) and, while a candidate version
is shadowed, the shadow's outcomes and the candidate's latency (core/shadow.py); the "Answers and drift" and
"Shadow" rows draw those, the drift panel with the window and thresholds of deploy/prometheus/drift.yml.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ernie_deploy.core import profile, shadow
from ernie_deploy.deployfiles import drift_rules

# Which served models a query has a series for, per (model, version): every model Triton serves (ensembles, their
# steps, fused models); those without the response cache (Triton has no request summary for the others); or only the
# models built with `build --cache`.
EVERY = "every"
UNCACHED = "uncached"
CACHED = "cached"
# Series that only some models export (a query's `needs` says which): what a monitored model answers, its reference
# (built with it), a shadow (while one runs).
WATCHED = "watched"

# The per-model metric names the pip server (Triton 2.51) exported with the summaries and the cache on (see above).
# A query naming anything else draws nothing: dashboard.dashboard() refuses it.
TRITON_METRICS = frozenset(
    {
        "nv_inference_request_success",
        "nv_inference_request_failure",
        "nv_inference_count",
        "nv_inference_exec_count",
        "nv_inference_pending_request_count",
        *(
            f"nv_inference_{what}_{kind}"
            for what in ("request", "queue", "compute_input", "compute_infer", "compute_output")
            for kind in ("duration_us", "summary_us", "summary_us_count", "summary_us_sum")
        ),
        "nv_cache_num_hits_per_model",
        "nv_cache_num_misses_per_model",
        "nv_cache_hit_duration_per_model",
        "nv_cache_miss_duration_per_model",
        *(f"nv_cache_{what}_summary_per_model{end}" for what in ("hit", "miss") for end in ("", "_count", "_sum")),
    }
)

# The series ernie-deploy's own answering steps export through Triton's custom metrics (core/profile.py,
# core/shadow.py); a query naming anything else of theirs draws nothing either.
SERVED_METRICS = frozenset(
    {
        profile.PROFILE_METRIC,
        profile.TEXTS_METRIC,
        profile.REFERENCE_METRIC,
        shadow.SHADOW_METRIC,
        shadow.SHADOW_FLIPS_METRIC,
        *(f"{shadow.SHADOW_LATENCY_METRIC}_{end}" for end in ("bucket", "sum", "count")),
    }
)
KNOWN_METRICS = TRITON_METRICS | SERVED_METRICS

# The template variables every query filters on; Grafana fills them in (a regex: several values, or All as ".+").
SELECTOR = 'job=~"$job", instance=~"$instance", model=~"$model", version=~"$version"'
LEGEND = "{{model}} v{{version}}"
_METRIC = re.compile(r"\b(?:nv|ernie_deploy)_\w+")


@dataclass(frozen=True)
class Query:
    """One PromQL query of a panel: its expression, legend and which served models it has series for."""

    expr: str
    legend: str
    serves: str = EVERY
    # With serves=WATCHED: the selector of the series a model must export for this query to draw it.
    needs: str = ""


@dataclass(frozen=True)
class PanelSpec:
    title: str
    unit: str  # Grafana's unit id
    description: str
    queries: tuple[Query, ...]
    thresholds: tuple[float, ...] = ()  # drawn as dashed lines (an alert's threshold)
    max: float | None = None  # the axis' top (None: Grafana's choice)


def _sum_rate(metric: str, matchers: str = "", by: str = "model, version") -> str:
    """Per-second increase of a counter, summed over the servers (pods) of each model and version."""
    extra = f", {matchers}" if matchers else ""
    return f"sum by ({by}) (rate({metric}{{{SELECTOR}{extra}}}[$__rate_interval]))"


def _per_request_ms(counter_us: str) -> str:
    """Mean milliseconds per successful request from a cumulative-microseconds counter (NaN while no request)."""
    return f"{_sum_rate(counter_us)} / {_sum_rate('nv_inference_request_success')} / 1000"


def _quantile_ms(summary_us: str, quantile: str, serves: str = EVERY) -> Query:
    """A latency summary's quantile in milliseconds; across servers, the slowest one's (quantiles do not add up)."""
    expr = f'max by (model, version) ({summary_us}{{{SELECTOR}, quantile="{quantile}"}}) / 1000'
    return Query(expr, f"{LEGEND} p{float(quantile) * 100:g}", serves)


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


def _profile_share(series: str, by: str = "model, version, series, bucket", extra: str = "") -> str:
    """Live share per bucket of `series` (a matcher) in each rate interval, of the series' total; none while no text."""
    part = f"{profile.PROFILE_METRIC}{{{SELECTOR}, {series}{', ' + extra if extra else ''}}}"
    whole = f"{profile.PROFILE_METRIC}{{{SELECTOR}, {series}}}"
    total_by = "model, version, series" if "series" in by else "model, version"
    return (
        f"sum by ({by}) (rate({part}[$__rate_interval]))\n/ ignoring (bucket) group_left ()\n"
        f"(sum by ({total_by}) (rate({whole}[$__rate_interval])) > 0)"
    )


def _beside_reference(series: str) -> tuple:
    """Each bucket's live share of `series` and, beside it, its share in the reference profile."""
    return (
        _watched(_profile_share(series), f"{LEGEND} {{{{bucket}}}}", _needs(profile.PROFILE_METRIC, series)),
        _watched(_reference(series), f"{LEGEND} {{{{bucket}}}} reference", _needs(profile.REFERENCE_METRIC, series)),
    )


def _reference(series: str, by: str = "model, version, series, bucket", extra: str = "") -> str:
    matchers = f"{SELECTOR}, {series}{', ' + extra if extra else ''}"
    shares = f"max by (model, version, series, bucket) ({profile.REFERENCE_METRIC}{{{matchers}}})"
    return shares if by == "model, version, series, bucket" else f"sum by ({by}) ({shares})"


def _watched(expr: str, legend: str, needs: str) -> Query:
    return Query(expr, legend, WATCHED, needs)


def _shadow_rate(outcomes: str, by: str = "model, version, candidate") -> str:
    return f'sum by ({by}) (rate({shadow.SHADOW_METRIC}{{{SELECTOR}, outcome=~"{outcomes}"}}[$__rate_interval]))'


def _needs(metric: str, series: str = "") -> str:
    return f"{metric}{{{series}}}" if series else metric


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
            _beside_reference(_ANSWER_SERIES),
            max=1.0,
        ),
        PanelSpec(
            "Low-confidence answers: share vs reference",
            "percentunit",
            "The share of a classifier's answers whose top confidence is under "
            f"{profile.LOW_CONFIDENCE_BUCKETS[-1].split('-')[1]}, live and in its reference; the alert level is the "
            f"reference's plus {drift_rules.LOW_CONFIDENCE_RISE:g} (ErnieDeployConfidenceCollapse, over {_W}).",
            (
                _watched(
                    _profile_share(_CONFIDENCE, "model, version", _LOW),
                    f"{LEGEND} live",
                    _needs(profile.PROFILE_METRIC, _CONFIDENCE),
                ),
                _watched(
                    _reference(_CONFIDENCE, "model, version", _LOW),
                    f"{LEGEND} reference",
                    _needs(profile.REFERENCE_METRIC, _CONFIDENCE),
                ),
                _watched(
                    f"{_reference(_CONFIDENCE, 'model, version', _LOW)} + {drift_rules.LOW_CONFIDENCE_RISE:g}",
                    f"{LEGEND} alert level",
                    _needs(profile.REFERENCE_METRIC, _CONFIDENCE),
                ),
            ),
            max=1.0,
        ),
        PanelSpec(
            "Text length: share per bucket of characters",
            "percentunit",
            "How long the texts sent are (both texts of a pair together), as each length bucket's share, and dashed "
            "the reference's. News titles fill 17-32; sentences and documents land further right.",
            _beside_reference(_CHARS),
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
                _watched(
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
                _watched(
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
                _watched(
                    f"{_shadow_rate('agree')}\n/\n({_shadow_rate('agree|disagree')} > 0)",
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
                _watched(
                    _shadow_rate("failed|skipped", "model, version, candidate, outcome"),
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
                _watched(
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
                (Query(_sum_rate("nv_inference_request_success"), LEGEND),),
            ),
            PanelSpec(
                "Failures per second, by reason",
                "reqps",
                "Failed requests by Triton's reason: BACKEND (the model itself failed, e.g. a dead python stub), OTHER "
                "(a bad request, or a failed step seen from its ensemble), REJECTED, CANCELED. Triton 2.51 counts each "
                "failed request of an ensemble twice.",
                (
                    Query(
                        _sum_rate("nv_inference_request_failure", by="model, version, reason"),
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
                        _sum_rate(
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
                    _quantile_ms("nv_inference_request_summary_us", "0.5", UNCACHED),
                    _quantile_ms("nv_inference_request_summary_us", "0.99", UNCACHED),
                    Query(_per_request_ms("nv_inference_request_duration_us"), f"{LEGEND} mean"),
                ),
            ),
            PanelSpec(
                "Per step: compute p50 and p99",
                "ms",
                "Time each Triton model spent running a request (the compute, without its queue): with the ensemble "
                "layout, which step the time goes to. " + _STEPS,
                (
                    _quantile_ms("nv_inference_compute_infer_summary_us", "0.5"),
                    _quantile_ms("nv_inference_compute_infer_summary_us", "0.99"),
                ),
            ),
            PanelSpec(
                "Queue time: mean and p99",
                "ms",
                "Time requests waited in a model's queue before running. An ensemble's own queue time is 0: the "
                "waiting happens in its steps.",
                (
                    Query(_per_request_ms("nv_inference_queue_duration_us"), f"{LEGEND} mean"),
                    _quantile_ms("nv_inference_queue_summary_us", "0.99"),
                ),
            ),
            PanelSpec(
                "Compute input, infer, output: mean per request",
                "ms",
                "The compute split as `ernie-deploy stats` shows it: input and output are a python step's "
                "shared-memory hops, infer its own work.",
                tuple(
                    Query(_per_request_ms(f"nv_inference_compute_{phase}_duration_us"), f"{LEGEND} {phase}")
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
                    Query(_sum_rate("nv_cache_num_hits_per_model"), f"{LEGEND} hits", CACHED),
                    Query(_sum_rate("nv_cache_num_misses_per_model"), f"{LEGEND} misses", CACHED),
                ),
            ),
            PanelSpec(
                "Cache hit ratio",
                "percentunit",
                "Hits over lookups in the window, for the models built with `build --cache`.",
                (
                    Query(
                        f"{_sum_rate('nv_cache_num_hits_per_model')} / ({_sum_rate('nv_cache_num_hits_per_model')} "
                        f"+ {_sum_rate('nv_cache_num_misses_per_model')})",
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

# Grafana's variables, each listing the label values that the ones before it select.
_SERIES = "nv_inference_request_success"
VARIABLES = (
    ("job", "Job", f"label_values({_SERIES}, job)"),
    ("instance", "Server", f'label_values({_SERIES}{{job=~"$job"}}, instance)'),
    ("model", "Model", f'label_values({_SERIES}{{job=~"$job", instance=~"$instance"}}, model)'),
    ("version", "Version", f'label_values({_SERIES}{{job=~"$job", instance=~"$instance", model=~"$model"}}, version)'),
)


def panels(rows=ROWS) -> list[PanelSpec]:
    return [panel for _, row in rows for panel in row]


def metric_names(expr: str) -> set[str]:
    """The metrics (Triton's, ernie-deploy's) a PromQL expression reads."""
    return set(_METRIC.findall(expr))


def unknown_metrics(rows=ROWS) -> dict[str, set[str]]:
    """{panel title: metric names it queries that neither Triton 2.51 nor ernie-deploy's steps export} (empty when
    all are real)."""
    found = {}
    for panel in panels(rows):
        unknown = set().union(*(metric_names(q.expr) for q in panel.queries)) - KNOWN_METRICS
        if unknown:
            found[panel.title] = unknown
    return found


def resolve(expr: str, rate_interval: str = "1m", **variables: str) -> str:
    """`expr` as Prometheus runs it outside Grafana: $__rate_interval and the variables (job, instance, model, version;
    ".+" for those not given, as the dashboard's All) filled in."""
    values = {name: variables.get(name, ".+") for name, _, _ in VARIABLES}
    expr = expr.replace("$__rate_interval", rate_interval)
    return re.sub(r"\$(\w+)", lambda m: values.get(m.group(1), m.group(0)), expr)
