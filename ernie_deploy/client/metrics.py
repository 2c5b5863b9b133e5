"""Read a server's Prometheus /metrics: the samples, and a shadow evaluation's counts among them (core.shadow).

`rollout --shadow` polls these to know how far the shadow is and what it found; `stats` reads the same series. The
series are counters that live as long as the serving step: a second shadow of the same versions starts from what
the first left, so a caller takes a summary before it starts and reads the difference (`ShadowSummary.since`).
"""

from __future__ import annotations

import math
import urllib.error
import urllib.request
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from ernie_deploy.core.endpoints import DEFAULT_METRICS_URL, PORTS
from ernie_deploy.core.errors import ServerNotReadyError
from ernie_deploy.core.shadow import SHADOW_FLIPS_METRIC, SHADOW_LATENCY_METRIC, SHADOW_METRIC, SHADOW_OUTCOMES


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


# The most of /metrics read: a server with 11 models scrapes at about 50 KB; far past that is not Triton's metrics.
MAX_METRICS_BYTES = 16 * 1024 * 1024


def parse(text: str) -> list[Sample]:
    """Every sample of a Prometheus text exposition (prometheus_client's own parser reads it). The parser names each
    sample of a counter `<name>_total` whether or not the text did (Triton's `x_bucket` counter is read back as
    `x_bucket_total`): compare names with `counter_name`."""
    from prometheus_client.parser import text_string_to_metric_families

    return [
        Sample(s.name, dict(s.labels), float(s.value))
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def counter_name(name: str) -> str:
    """A counter's name without its `_total`, however it was written or parsed."""
    return name[: -len("_total")] if name.endswith("_total") else name


def scrape(url: str = DEFAULT_METRICS_URL, timeout: float = 5.0) -> list[Sample]:
    """GET `url` (a server's /metrics, never through a proxy) and parse it."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout) as response:
            body = response.read(MAX_METRICS_BYTES + 1)
    except (urllib.error.URLError, OSError) as exc:
        raise ServerNotReadyError(
            f"could not read the server's metrics at {url}: {getattr(exc, 'reason', exc)}",
            "pass --metrics-url the server's metrics address (tritonserver --metrics-port; default port "
            f"{PORTS['metrics']})",
        ) from None
    fix = f"pass --metrics-url the server's metrics address (its --metrics-port; default port {PORTS['metrics']})"
    if len(body) > MAX_METRICS_BYTES:
        raise ServerNotReadyError(f"{url} answered more than {MAX_METRICS_BYTES:,} bytes: not Triton's metrics", fix)
    try:
        return parse(body.decode("utf-8", "replace"))
    except ValueError:  # an HTML page, JSON, another service on the port
        raise ServerNotReadyError(f"{url} answered something other than Prometheus' text format", fix) from None


@dataclass
class ShadowSummary:
    """One shadow's counts: texts by outcome, the label-flip table (serving label, candidate label) -> texts, and the
    candidate's latency histogram (upper edge in seconds -> requests at or under it, cumulative)."""

    outcomes: dict[str, float] = field(default_factory=lambda: dict.fromkeys(SHADOW_OUTCOMES, 0.0))
    flips: dict[tuple[str, str], float] = field(default_factory=dict)
    latency: dict[float, float] = field(default_factory=dict)
    latency_count: float = 0.0
    latency_sum: float = 0.0

    @property
    def agree(self) -> int:
        return int(self.outcomes.get("agree", 0))

    @property
    def disagree(self) -> int:
        return int(self.outcomes.get("disagree", 0))

    @property
    def failed(self) -> int:
        return int(self.outcomes.get("failed", 0))

    @property
    def skipped(self) -> int:
        return int(self.outcomes.get("skipped", 0))

    @property
    def compared(self) -> int:
        """Texts the shadow dealt with: answered by the candidate (agreeing or not) or failed there."""
        return self.agree + self.disagree + self.failed

    @property
    def agreement(self) -> float | None:
        """The share of the candidate's answers that agree with the serving ones (None before any)."""
        answered = self.agree + self.disagree
        return self.agree / answered if answered else None

    def since(self, before: ShadowSummary) -> ShadowSummary:
        """What was counted after `before` was read (a counter that went down, a reloaded step, counts from 0)."""

        def minus(now: float, then: float) -> float:
            return now - then if now >= then else now

        return ShadowSummary(
            {k: minus(v, before.outcomes.get(k, 0.0)) for k, v in self.outcomes.items()},
            {k: minus(v, before.flips.get(k, 0.0)) for k, v in self.flips.items() if minus(v, before.flips.get(k, 0))},
            {k: minus(v, before.latency.get(k, 0.0)) for k, v in self.latency.items()},
            minus(self.latency_count, before.latency_count),
            minus(self.latency_sum, before.latency_sum),
        )

    def off_diagonal(self) -> list[tuple[str, str, int]]:
        """The flips where the labels differ, most common first."""
        rows = [(s, c, int(n)) for (s, c), n in self.flips.items() if s != c and n > 0]
        return sorted(rows, key=lambda row: (-row[2], row[0], row[1]))

    def quantile(self, q: float) -> float | None:
        """The candidate latency's `q` quantile in seconds, interpolated inside its bucket the way Prometheus'
        histogram_quantile does (None before any request; the last finite edge where it falls past them)."""
        edges = sorted(self.latency)
        total = max([self.latency_count, *self.latency.values()])
        if not edges or total <= 0:
            return None
        rank = q * total
        lower_edge, lower_count = 0.0, 0.0
        for edge in edges:
            count = self.latency[edge]
            if count >= rank:
                if math.isinf(edge):
                    return lower_edge
                if count == lower_count:
                    return edge
                return lower_edge + (edge - lower_edge) * (rank - lower_count) / (count - lower_count)
            lower_edge, lower_count = edge, count
        return lower_edge


def shadow_summary(
    samples: Iterable[Sample], model: str, serving_version: int | str, candidate: str | Collection[str] | None = None
) -> ShadowSummary:
    """The shadow series of served model `model` whose serving version is `serving_version`, for the candidate
    labelled `candidate` (one label, several, or None: every candidate), added up."""
    wanted = {candidate} if isinstance(candidate, str) else (set(candidate) if candidate is not None else None)
    summary = ShadowSummary()
    outcomes, flips = counter_name(SHADOW_METRIC), counter_name(SHADOW_FLIPS_METRIC)
    bucket, total, count = (f"{SHADOW_LATENCY_METRIC}{suffix}" for suffix in ("_bucket", "_sum", "_count"))
    for sample in samples:
        name = counter_name(sample.name)
        labels = sample.labels
        if labels.get("model") != model or labels.get("version") != str(serving_version):
            continue
        if wanted is not None and labels.get("candidate") not in wanted:
            continue
        if name == outcomes:
            outcome = labels.get("outcome", "")
            summary.outcomes[outcome] = summary.outcomes.get(outcome, 0.0) + sample.value
        elif name == flips:
            key = (labels.get("serving_label", ""), labels.get("candidate_label", ""))
            summary.flips[key] = summary.flips.get(key, 0.0) + sample.value
        elif name == bucket:
            edge = float(labels.get("le", "+Inf"))
            summary.latency[edge] = summary.latency.get(edge, 0.0) + sample.value
        elif name == total:
            summary.latency_sum += sample.value
        elif name == count:
            summary.latency_count += sample.value
    return summary
