"""What a model answers, as counts in buckets: the live series a served model exports and the reference profile its
record carries, in one vocabulary so the two can be compared bucket by bucket.

A profile is a set of *series* (what is counted) each split into named *buckets*; a series' shares are its bucket
counts over its total. Every bucket a model can report is known before it answers (its labels, entity types and the
fixed buckets below), so the live series are created at zero and a bucket the live traffic never hits still takes
part in the drift score, as it must.

The metric names here are what deploy/prometheus/ records and alerts on, the dashboard draws and `stats` reads;
renaming one breaks those files and every dashboard built on them.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field

# Live counts per model, version, series and bucket (counters), and the texts answered (the denominator of rates).
PROFILE_METRIC = "ernie_deploy_profile_total"
TEXTS_METRIC = "ernie_deploy_texts_total"
# The reference profile of the same model and version: each bucket's share of its series (gauges, 0..1).
REFERENCE_METRIC = "ernie_deploy_reference_share"
# The label names every profile series carries (Prometheus adds job and instance).
PROFILE_LABELS = ("model", "version", "series", "bucket")
# The config parameter of the step that answers naming the model its series are labelled with (their `model` label);
# absent, the step counts nothing. Not `monitor`: that is the build option (whether to watch at all), a bool, and one
# name has one meaning. Here, below serving and operate, because the served step reads it and `shadow` sets it.
WATCHED_MODEL_PARAMETER = "watched_model"

# The series. Which a model reports is its kind's (kinds/<kind>/serving.py PROFILE); `chars` and `reading` are every
# model's.
LABEL = "label"  # a classifier's answer per text; a multi-label model's every answered label
LABELS_PER_TEXT = "labels_per_text"  # multi-label: how many labels a text got
ENTITY_TYPE = "entity_type"  # token models: entities per type
ENTITIES_PER_TEXT = "entities_per_text"  # token models: how many entities a text held
SPAN_TYPE = "span_type"  # extraction models: spans per type (relations too)
SPANS_PER_TEXT = "spans_per_text"  # extraction models: how many spans a text's answer held
CONFIDENCE = "confidence"  # the top confidence of a classifier's answer; an extracted span's probability
CHARS = "chars"  # text length in characters (both texts of a pair)
READING = "reading"  # how the text was read: whole, cut to the model's length, or in windows
SERIES = (LABEL, LABELS_PER_TEXT, ENTITY_TYPE, ENTITIES_PER_TEXT, SPAN_TYPE, SPANS_PER_TEXT, CONFIDENCE, CHARS, READING)

# Top-confidence buckets: finer near 1, where a trained classifier's answers sit (the demo classifier answers 80% of
# its test split above 0.9), so a slide of confidence shows before the answers turn.
CONFIDENCE_EDGES = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)
CONFIDENCE_BUCKETS = ("0-0.5", "0.5-0.6", "0.6-0.7", "0.7-0.8", "0.8-0.9", "0.9-0.95", "0.95-1")
# The answers counted as low-confidence by the alert on confidence collapsing: the top class under 0.6.
LOW_CONFIDENCE_BUCKETS = ("0-0.5", "0.5-0.6")
# Length buckets in characters, doubling: news titles (10-30) and MSRA sentences (20-100) fall in different ones,
# documents past 1,024 in the last.
CHAR_EDGES = (16, 32, 64, 128, 256, 512, 1024)
CHAR_BUCKETS = ("1-16", "17-32", "33-64", "65-128", "129-256", "257-512", "513-1024", "1025+")
# Counts per text (entities, labels).
COUNT_EDGES = (1, 2, 3, 4, 8)
COUNT_BUCKETS = ("0", "1", "2", "3", "4-7", "8+")
WHOLE, CUT, WINDOWS = "whole", "cut", "windows"
READINGS = (WHOLE, CUT, WINDOWS)


def confidence_bucket(confidence: float) -> str:
    return CONFIDENCE_BUCKETS[bisect.bisect_right(CONFIDENCE_EDGES, float(confidence))]


def chars_bucket(chars: int) -> str:
    return CHAR_BUCKETS[bisect.bisect_left(CHAR_EDGES, int(chars))]


def count_bucket(count: int) -> str:
    return COUNT_BUCKETS[bisect.bisect_right(COUNT_EDGES, int(count))]


def entity_types(labels: Iterable[str]) -> list[str]:
    """The entity types of a token model's BIO labels (B-PER, I-PER -> PER), in label order."""
    seen: dict[str, None] = {}
    for label in labels:
        if label[:2] in ("B-", "I-"):
            seen.setdefault(label[2:], None)
    return list(seen)


# Each series' buckets, given the model's labels (None: the series has fixed buckets).
_FIXED = {
    LABELS_PER_TEXT: COUNT_BUCKETS,
    ENTITIES_PER_TEXT: COUNT_BUCKETS,
    SPANS_PER_TEXT: COUNT_BUCKETS,
    CONFIDENCE: CONFIDENCE_BUCKETS,
    CHARS: CHAR_BUCKETS,
    READING: READINGS,
}


def buckets(series: str, labels: Iterable[str]) -> tuple[str, ...]:
    """Every bucket `series` has for a model with `labels`."""
    if series in _FIXED:
        return _FIXED[series]
    if series in (LABEL, SPAN_TYPE):  # an extraction model's labels are the types it was trained to find
        return tuple(labels)
    if series == ENTITY_TYPE:
        return tuple(entity_types(labels))
    raise ValueError(f"unknown profile series {series!r}; one of {', '.join(SERIES)}")


@dataclass
class Profile:
    """Counts per (series, bucket); what a served step adds up between flushes and what a reference is made of."""

    counts: dict[tuple[str, str], int] = field(default_factory=dict)
    texts: int = 0

    def add(self, series: str, bucket: str, n: int = 1) -> None:
        key = (series, bucket)
        self.counts[key] = self.counts.get(key, 0) + n

    def merge(self, other: Profile) -> None:
        for key, n in other.counts.items():
            self.counts[key] = self.counts.get(key, 0) + n
        self.texts += other.texts

    def shares(self, series: Iterable[str], labels: Iterable[str]) -> dict[str, dict[str, float]]:
        """Per series, each bucket's share of the series' total (every bucket present, 0 where none fell; a series
        with no count at all is left out: it has no shares)."""
        labels = tuple(labels)
        out: dict[str, dict[str, float]] = {}
        for name in series:
            names = buckets(name, labels)
            total = sum(self.counts.get((name, b), 0) for b in names)
            if total:
                out[name] = {b: self.counts.get((name, b), 0) / total for b in names}
        return out

    def __bool__(self) -> bool:
        return bool(self.counts) or bool(self.texts)
