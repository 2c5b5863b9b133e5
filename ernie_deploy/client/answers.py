"""What the served models answer, against their reference, read from the server's /metrics: per model and version,
each profile series' live counts (ernie_deploy_profile_total, counted since the model loaded) beside the reference
shares set at load (ernie_deploy_reference_share), the drift score per series, and a running shadow evaluation's
agreement and flips (ernie_deploy_shadow_*). The vocabulary of series and buckets is core.profile's; the shadow
series are core.shadow's.

The drift score is the Jensen-Shannon divergence with log base 2: 0 for the same distribution, 1 for two that share
no bucket. Not PSI: a bucket empty on one side (a label the live traffic never got, a length the reference never
saw) makes PSI infinite, while JS stays within 0..1, so one threshold reads the same for every model and bucket
count. deploy/prometheus/drift.yml records the same score over a window; `stats` shows it since load (or over
--interval).

/metrics is read by client.metrics (prometheus_client's parser). That parser names a counter's samples with a
`_total` suffix whether or not the family declared one (a counter family `x_count` reads as samples `x_count_total`),
so names are matched with and without it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ernie_deploy.client.metrics import Sample, ShadowSummary
from ernie_deploy.client.metrics import parse as parse_samples
from ernie_deploy.client.metrics import scrape as scrape_samples
from ernie_deploy.core.endpoints import DEFAULT_METRICS_URL
from ernie_deploy.core.profile import (
    CHAR_BUCKETS,
    CHARS,
    CONFIDENCE,
    CONFIDENCE_BUCKETS,
    COUNT_BUCKETS,
    ENTITIES_PER_TEXT,
    LABELS_PER_TEXT,
    PROFILE_METRIC,
    READING,
    READINGS,
    REFERENCE_METRIC,
    SERIES,
    SPANS_PER_TEXT,
    TEXTS_METRIC,
)
from ernie_deploy.core.shadow import SHADOW_FLIPS_METRIC, SHADOW_LATENCY_METRIC, SHADOW_METRIC, SHADOW_OUTCOMES

NO_REFERENCE = "no reference profile (build --reference FILE, or a dev split)"
# A series' fixed buckets, in their order (a label's or entity type's order is the scrape's).
_ORDER = {
    CONFIDENCE: CONFIDENCE_BUCKETS,
    CHARS: CHAR_BUCKETS,
    READING: READINGS,
    LABELS_PER_TEXT: COUNT_BUCKETS,
    ENTITIES_PER_TEXT: COUNT_BUCKETS,
    SPANS_PER_TEXT: COUNT_BUCKETS,
}
# Triton's own per-model series, to tell that a scrape is the same server's as its statistics.
_TRITON_SUCCESS = "nv_inference_request_success"
_MS_PER_S = 1e3  # the latency histogram is in seconds
TOP_FLIPS = 5  # the most common flips shown


def js_divergence(p: Mapping[str, float], q: Mapping[str, float]) -> float | None:
    """The Jensen-Shannon divergence, log base 2 (0..1), of two distributions over named buckets, given as counts or
    shares (each is normalized; a bucket missing from one side counts 0 there). None where a side has no mass at
    all: there is nothing to compare. A bucket empty on one side adds a finite term, bounded by its share."""
    keys = list(dict.fromkeys([*p, *q]))
    tp = sum(max(float(p.get(k, 0.0)), 0.0) for k in keys)
    tq = sum(max(float(q.get(k, 0.0)), 0.0) for k in keys)
    if tp <= 0 or tq <= 0:
        return None
    js = 0.0
    for k in keys:
        a = max(float(p.get(k, 0.0)), 0.0) / tp
        b = max(float(q.get(k, 0.0)), 0.0) / tq
        m = (a + b) / 2
        if a > 0:
            js += a * math.log2(a / m) / 2
        if b > 0:
            js += b * math.log2(b / m) / 2
    return min(max(js, 0.0), 1.0)  # rounding can step a hair outside


def running(shadow: ShadowSummary) -> bool:
    """Whether a shadow has counted anything (its series exist at 0 from the moment a plan is set)."""
    return any(v > 0 for v in shadow.outcomes.values())


@dataclass
class VersionAnswers:
    """One served model version's answer series."""

    model: str
    version: str
    texts: float = 0.0
    live: dict[str, dict[str, float]] = field(default_factory=dict)  # series -> bucket -> count
    reference: dict[str, dict[str, float]] = field(default_factory=dict)  # series -> bucket -> share
    shadows: dict[str, ShadowSummary] = field(default_factory=dict)  # by candidate version

    def series(self) -> list[str]:
        """The series it reports, in core.profile's order (any other after, by name)."""
        names = set(self.live) | set(self.reference)
        return [s for s in SERIES if s in names] + sorted(names - set(SERIES))

    def buckets(self, series: str) -> list[str]:
        seen = [*self.reference.get(series, {}), *self.live.get(series, {})]
        fixed = _ORDER.get(series, ())
        return [b for b in fixed if b in seen] + [b for b in dict.fromkeys(seen) if b not in fixed]

    def live_shares(self, series: str) -> dict[str, float] | None:
        counts = self.live.get(series, {})
        total = sum(counts.values())
        return {b: n / total for b, n in counts.items()} if total > 0 else None

    def drift(self, series: str) -> float | None:
        """The series' JS divergence from its reference (None: no reference for it, or no text counted yet)."""
        if series not in self.reference:
            return None
        return js_divergence(self.live.get(series, {}), self.reference[series])

    def since(self, before: VersionAnswers | None) -> VersionAnswers:
        """What was counted after `before` (a counter that went down was reset by a reload: its count is all new)."""
        if before is None:
            return self
        return VersionAnswers(
            self.model,
            self.version,
            _minus({"": self.texts}, {"": before.texts})[""],
            {s: _minus(b, before.live.get(s, {})) for s, b in self.live.items()},
            self.reference,
            {c: sh.since(before.shadows.get(c, ShadowSummary())) for c, sh in self.shadows.items()},
        )

    def to_dict(self) -> dict:
        def share(x: float | None) -> float | None:
            return None if x is None else round(x, 6)

        series = {}
        for name in self.series():
            live, shares, ref = self.live.get(name, {}), self.live_shares(name) or {}, self.reference.get(name)
            series[name] = {
                "js": share(self.drift(name)),
                "buckets": {
                    b: {
                        "count": int(live.get(b, 0)),
                        "share": share(shares.get(b)) if shares else None,
                        "reference": None if ref is None else share(ref.get(b, 0.0)),
                    }
                    for b in self.buckets(name)
                },
            }
        return {
            "texts": int(self.texts),
            "reference": bool(self.reference),
            "series": series,
            "shadow": {c: _shadow_dict(sh) for c, sh in sorted(self.shadows.items()) if running(sh)},
        }


def _shadow_dict(sh: ShadowSummary) -> dict:
    def ms(seconds: float | None) -> float | None:
        return None if seconds is None else round(seconds * _MS_PER_S, 3)

    return {
        **{o: int(sh.outcomes.get(o, 0)) for o in SHADOW_OUTCOMES},
        "compared": sh.compared,
        "agreement": None if sh.agreement is None else round(sh.agreement, 6),
        "candidate_mean_ms": ms(sh.latency_sum / sh.latency_count if sh.latency_count else None),
        "candidate_p99_ms": ms(sh.quantile(0.99)),
        "flips": [list(f) for f in sh.off_diagonal()[:TOP_FLIPS]],
    }


@dataclass
class Answers:
    """Every model version's answer series in one scrape of /metrics."""

    versions: dict[tuple[str, str], VersionAnswers] = field(default_factory=dict)
    triton_models: set[str] = field(default_factory=set)  # models with Triton's own series: the server's models

    @property
    def monitoring(self) -> bool:
        """Whether any model on the server exports its answers (False: every one was built with monitoring off)."""
        return bool(self.versions)

    def of(self, model: str) -> list[VersionAnswers]:
        found = [v for (m, _), v in self.versions.items() if m == model]
        return sorted(found, key=lambda v: (not v.version.isdigit(), int(v.version) if v.version.isdigit() else 0))

    def since(self, before: Answers) -> Answers:
        return Answers({k: v.since(before.versions.get(k)) for k, v in self.versions.items()}, self.triton_models)


def parse(text: str) -> Answers:
    """The answer series of a /metrics text (Prometheus' text format). ValueError where it is not that format."""
    return read(parse_samples(text))


def read(samples: Iterable[Sample]) -> Answers:
    """The answer series among a scrape's samples (client.metrics)."""
    answers = Answers()

    def version(labels: dict) -> VersionAnswers:
        key = (labels.get("model", ""), labels.get("version", ""))
        if key not in answers.versions:
            answers.versions[key] = VersionAnswers(*key)
        return answers.versions[key]

    def shadow(labels: dict) -> ShadowSummary:
        return version(labels).shadows.setdefault(labels.get("candidate", ""), ShadowSummary())

    for sample in samples:
        name, labels, value = _name(sample.name), sample.labels, float(sample.value)
        if math.isnan(value):
            continue
        if name == _name(_TRITON_SUCCESS) and "model" in labels:
            answers.triton_models.add(labels["model"])
        elif name == _name(PROFILE_METRIC):
            version(labels).live.setdefault(labels.get("series", ""), {})[labels.get("bucket", "")] = value
        elif name == _name(TEXTS_METRIC):
            version(labels).texts = value
        elif name == _name(REFERENCE_METRIC):
            version(labels).reference.setdefault(labels.get("series", ""), {})[labels.get("bucket", "")] = value
        elif name == _name(SHADOW_METRIC):
            shadow(labels).outcomes[labels.get("outcome", "")] = value
        elif name == _name(SHADOW_FLIPS_METRIC):
            shadow(labels).flips[(labels.get("serving_label", ""), labels.get("candidate_label", ""))] = value
        elif name == f"{SHADOW_LATENCY_METRIC}_bucket":
            shadow(labels).latency[float(labels.get("le", "+Inf"))] = value
        elif name == f"{SHADOW_LATENCY_METRIC}_sum":
            shadow(labels).latency_sum = value
        elif name == f"{SHADOW_LATENCY_METRIC}_count":
            shadow(labels).latency_count = value
    return answers


def scrape(url: str = DEFAULT_METRICS_URL, timeout: float = 5.0) -> Answers:
    """GET the server's /metrics and read its answer series; ServerNotReadyError naming the URL and the fix where
    it cannot."""
    return read(scrape_samples(url, timeout))


def format_answers(
    answers: Answers, models: Iterable[str], *, url: str, since_load: bool = True, buckets: bool = True
) -> str:
    """Per served model and version: texts, the drift per series, each bucket's live share beside the reference's
    (buckets empty on both sides left out), and a running shadow's agreement, outcomes and most common flips."""
    models = list(models)
    window = "since each model loaded" if since_load else "over the interval"
    if not answers.monitoring:
        return (
            f"answers: monitoring is off on this server: {url} has no {PROFILE_METRIC} series (models built with "
            "--no-monitor, or only graph-postprocess models on onnxruntime, which have no python step to count in)"
        )
    lines = [f"answers {window} ({url}; drift: Jensen-Shannon against the reference, 0 same .. 1 disjoint):"]
    for model in models:
        versions = answers.of(model)
        if not versions:
            lines += [
                f"{model}: no answer series (built with --no-monitor; a graph-postprocess model on onnxruntime "
                "exports none: build it with --runtime python or another layout to monitor it)",
                "",
            ]
            continue
        for v in versions:
            lines += _version_lines(v, buckets)
            lines.append("")
    return "\n".join(lines).rstrip()


def _version_lines(v: VersionAnswers, buckets: bool) -> list[str]:
    lines = [f"{v.model} v{v.version}: {int(v.texts):,} {'text' if int(v.texts) == 1 else 'texts'}"]
    if not v.reference:
        lines.append(f"  {NO_REFERENCE}")
    drifts = [(s, v.drift(s)) for s in v.series()]
    shown = [f"{s} {d:.3f}" for s, d in drifts if d is not None]
    if shown:
        lines.append(f"  drift: {', '.join(shown)}")
    elif v.reference:
        lines.append("  drift: no text counted yet")
    if buckets:
        for name in v.series():
            lines += _series_lines(v, name)
    for candidate, shadow in sorted(v.shadows.items()):
        if running(shadow):
            lines += _shadow_lines(candidate, shadow)
    return lines


def _series_lines(v: VersionAnswers, name: str) -> list[str]:
    live, shares, ref = v.live.get(name, {}), v.live_shares(name) or {}, v.reference.get(name)
    drift = v.drift(name)
    head = f"  {name}" + (f" (drift {drift:.3f})" if drift is not None else "")
    rows = [f"{head}:", f"    {'bucket':<20} {'count':>9} {'live':>7} {'reference':>9}"]
    for b in v.buckets(name):
        if not live.get(b) and not (ref or {}).get(b):
            continue
        share = f"{shares[b]:.1%}" if b in shares else "-"
        reference = "-" if ref is None else f"{ref.get(b, 0.0):.1%}"
        rows.append(f"    {b:<20} {int(live.get(b, 0)):>9,} {share:>7} {reference:>9}")
    return rows if len(rows) > 2 else [f"{head}: nothing counted"]


def _shadow_lines(candidate: str, sh: ShadowSummary) -> list[str]:
    agreement = f"agreement {sh.agreement:.1%}" if sh.agreement is not None else "no answer compared yet"
    latency = ""
    if sh.latency_count:
        latency = f"; candidate {sh.latency_sum / sh.latency_count * _MS_PER_S:.1f} ms mean per request"
        p99 = sh.quantile(0.99)
        latency += f", p99 {p99 * _MS_PER_S:.1f} ms" if p99 is not None else ""
    lines = [
        f"  shadow of v{candidate}: {agreement} ({sh.agree:,} agree, {sh.disagree:,} disagree); "
        f"{sh.compared:,} compared, {sh.failed:,} failed, {sh.skipped:,} skipped{latency}"
    ]
    flips = sh.off_diagonal()[:TOP_FLIPS]
    if flips:
        lines.append(
            "    most common flips (serving -> candidate): " + ", ".join(f"{a} -> {b} ({n:,})" for a, b, n in flips)
        )
    return lines


def _name(sample: str) -> str:
    return sample[: -len("_total")] if sample.endswith("_total") else sample


def _minus(after: dict, before: dict) -> dict:
    return {k: (n - before.get(k, 0) if n >= before.get(k, 0) else n) for k, n in after.items()}


def model_dict(answers: Answers | None, model: str, *, url: str, problem: str | None = None) -> dict:
    """One served model's answers as plain numbers, for `stats --json`: `monitoring` (null where /metrics was not
    read, with `problem` saying why) and per version its texts, series (drift `js`, each bucket's count, live share
    and reference share; null where there is none) and running shadows."""
    if answers is None:
        return {"metrics_url": url, "monitoring": None, "problem": problem, "versions": {}}
    return {
        "metrics_url": url,
        "monitoring": answers.monitoring,
        "problem": problem,
        "versions": {v.version: v.to_dict() for v in answers.of(model)},
    }
