"""The PromQL the Grafana dashboard's panels are made of (deployfiles/dashboard_panels.py holds the panels): the metric
names Triton exports, which a query must stay within, the template variables every query filters on, a query as data
(its expression, legend and which served models it has series for) and the expressions the panels' queries share.

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
"Shadow" rows of dashboard_panels.py draw those, the drift panel with the window and thresholds of
deploy/prometheus/drift.yml.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ernie_deploy.core import profile, shadow

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


def sum_rate(metric: str, matchers: str = "", by: str = "model, version") -> str:
    """Per-second increase of a counter, summed over the servers (pods) of each model and version."""
    extra = f", {matchers}" if matchers else ""
    return f"sum by ({by}) (rate({metric}{{{SELECTOR}{extra}}}[$__rate_interval]))"


def per_request_ms(counter_us: str) -> str:
    """Mean milliseconds per successful request from a cumulative-microseconds counter (NaN while no request)."""
    return f"{sum_rate(counter_us)} / {sum_rate('nv_inference_request_success')} / 1000"


def quantile_ms(summary_us: str, quantile: str, serves: str = EVERY) -> Query:
    """A latency summary's quantile in milliseconds; across servers, the slowest one's (quantiles do not add up)."""
    expr = f'max by (model, version) ({summary_us}{{{SELECTOR}, quantile="{quantile}"}}) / 1000'
    return Query(expr, f"{LEGEND} p{float(quantile) * 100:g}", serves)


# -- what the models answer (core/profile.py) and the shadow (core/shadow.py) ----------------------------------------


def profile_share(series: str, by: str = "model, version, series, bucket", extra: str = "") -> str:
    """Live share per bucket of `series` (a matcher) in each rate interval, of the series' total; none while no text."""
    part = f"{profile.PROFILE_METRIC}{{{SELECTOR}, {series}{', ' + extra if extra else ''}}}"
    whole = f"{profile.PROFILE_METRIC}{{{SELECTOR}, {series}}}"
    total_by = "model, version, series" if "series" in by else "model, version"
    return (
        f"sum by ({by}) (rate({part}[$__rate_interval]))\n/ ignoring (bucket) group_left ()\n"
        f"(sum by ({total_by}) (rate({whole}[$__rate_interval])) > 0)"
    )


def beside_reference(series: str) -> tuple:
    """Each bucket's live share of `series` and, beside it, its share in the reference profile."""
    return (
        watched(profile_share(series), f"{LEGEND} {{{{bucket}}}}", needs_series(profile.PROFILE_METRIC, series)),
        watched(
            reference_shares(series),
            f"{LEGEND} {{{{bucket}}}} reference",
            needs_series(profile.REFERENCE_METRIC, series),
        ),
    )


def reference_shares(series: str, by: str = "model, version, series, bucket", extra: str = "") -> str:
    matchers = f"{SELECTOR}, {series}{', ' + extra if extra else ''}"
    shares = f"max by (model, version, series, bucket) ({profile.REFERENCE_METRIC}{{{matchers}}})"
    return shares if by == "model, version, series, bucket" else f"sum by ({by}) ({shares})"


def watched(expr: str, legend: str, needs: str) -> Query:
    return Query(expr, legend, WATCHED, needs)


def shadow_rate(outcomes: str, by: str = "model, version, candidate") -> str:
    return f'sum by ({by}) (rate({shadow.SHADOW_METRIC}{{{SELECTOR}, outcome=~"{outcomes}"}}[$__rate_interval]))'


def needs_series(metric: str, series: str = "") -> str:
    return f"{metric}{{{series}}}" if series else metric


# Grafana's variables, each listing the label values that the ones before it select.
_SERIES = "nv_inference_request_success"
VARIABLES = (
    ("job", "Job", f"label_values({_SERIES}, job)"),
    ("instance", "Server", f'label_values({_SERIES}{{job=~"$job"}}, instance)'),
    ("model", "Model", f'label_values({_SERIES}{{job=~"$job", instance=~"$instance"}}, model)'),
    ("version", "Version", f'label_values({_SERIES}{{job=~"$job", instance=~"$instance", model=~"$model"}}, version)'),
)


def metric_names(expr: str) -> set[str]:
    """The metrics (Triton's, ernie-deploy's) a PromQL expression reads."""
    return set(_METRIC.findall(expr))


def resolve(expr: str, rate_interval: str = "1m", **variables: str) -> str:
    """`expr` as Prometheus runs it outside Grafana: $__rate_interval and the variables (job, instance, model, version;
    ".+" for those not given, as the dashboard's All) filled in."""
    values = {name: variables.get(name, ".+") for name, _, _ in VARIABLES}
    expr = expr.replace("$__rate_interval", rate_interval)
    return re.sub(r"\$(\w+)", lambda m: values.get(m.group(1), m.group(0)), expr)
