"""The watch on what a model answers (serving.watch), offline: each kind's answers in its series, the lengths and
readings of the texts, a request that failed left out, the shadow's outcomes and flips, and counts kept outside
Triton. The served side (the series on a real server's /metrics, in every layout and wire) is
tests/test_layout_matrix.py's."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ernie_deploy.core.profile import (
    CHAR_BUCKETS,
    COUNT_BUCKETS,
    Profile,
    buckets,
    chars_bucket,
    confidence_bucket,
    count_bucket,
    entity_types,
)
from ernie_deploy.core.shadow import SHADOW_FLIPS_METRIC, SHADOW_METRIC, ShadowPlan
from ernie_deploy.serving.metrics import Counts
from ernie_deploy.serving.postprocess_steps import WATCHES
from ernie_deploy.serving.watch import Mirror, observe

LABELS = ["sports", "stocks", "science"]


def _texts(*texts: str) -> np.ndarray:
    return np.array([t.encode("utf-8") for t in texts], dtype=np.object_).reshape(-1, 1)


def test_buckets_cover_every_value_once():
    assert [confidence_bucket(x) for x in (0.0, 0.49, 0.5, 0.94, 0.95, 1.0)] == [
        "0-0.5",
        "0-0.5",
        "0.5-0.6",
        "0.9-0.95",
        "0.95-1",
        "0.95-1",
    ]
    assert [chars_bucket(n) for n in (1, 16, 17, 1024, 1025, 10**6)] == ["1-16", "1-16", "17-32", "513-1024"] + [
        CHAR_BUCKETS[-1]
    ] * 2
    assert [count_bucket(n) for n in (0, 1, 3, 4, 7, 8, 500)] == ["0", "1", "3", "4-7", "4-7", "8+", "8+"]
    assert entity_types(["O", "B-PER", "I-PER", "B-ORG", "I-ORG"]) == ["PER", "ORG"]
    assert buckets("entities_per_text", LABELS) == COUNT_BUCKETS
    with pytest.raises(ValueError, match="unknown profile series"):
        buckets("nope", LABELS)


def test_a_classifier_counts_its_labels_confidence_lengths_and_readings():
    profile = Profile()
    outputs = {
        "label_id": np.array([[0], [1], [0]]),
        "confidence": np.array([[0.97], [0.55], [0.81]], dtype=np.float32),
        "truncated": np.array([[False], [True], [False]]),
    }
    seen = {"text": _texts("国足", "股" * 300, "科学"), "text_pair": None}
    answers = observe(profile, WATCHES["sequence"], LABELS, seen, outputs)
    assert [a[0] for a in answers] == ["sports", "stocks", "sports"]
    assert profile.texts == 3
    assert profile.counts == {
        ("label", "sports"): 2,
        ("label", "stocks"): 1,
        ("confidence", "0.95-1"): 1,
        ("confidence", "0.5-0.6"): 1,
        ("confidence", "0.8-0.9"): 1,
        ("chars", "1-16"): 2,
        ("chars", "257-512"): 1,
        ("reading", "whole"): 2,
        ("reading", "cut"): 1,
    }
    shares = profile.shares(["label", "chars"], LABELS)
    assert shares["label"] == {"sports": 2 / 3, "stocks": 1 / 3, "science": 0.0}
    assert sum(shares["chars"].values()) == pytest.approx(1.0)


def test_a_pair_counts_both_texts_and_bad_utf8_is_counted_not_raised():
    profile = Profile()
    outputs = {"label_id": np.array([[2]]), "confidence": np.array([[0.3]], dtype=np.float32)}
    seen = {"text": _texts("a" * 10), "text_pair": _texts("b" * 10)}
    observe(profile, WATCHES["sequence"], LABELS, seen, outputs)
    assert profile.counts[("chars", "17-32")] == 1
    bad = {"text": np.array([b"\xff\xfe abc"], dtype=np.object_).reshape(1, 1)}
    observe(profile, WATCHES["sequence"], LABELS, bad, outputs)
    assert profile.counts[("chars", "1-16")] == 1


def test_entities_count_per_type_and_per_text_in_either_wire():
    native = [{"type": "PER", "start": 0, "end": 2, "text": "张三"}, {"type": "ORG", "start": 3, "end": 7, "text": "x"}]
    paddlenlp = [{"pos": [0, 1], "label": "PER"}, {"pos": [3, 6], "label": "ORG"}]
    watch = WATCHES["token"]
    answers = {}
    for name, spans in (("native", native), ("paddlenlp", paddlenlp)):
        profile = Profile()
        outputs = {"entities": np.array([json.dumps(spans).encode(), b"[]"], dtype=np.object_).reshape(2, 1)}
        seen = {"text": _texts("张三在北京大学", "无"), "window_starts": np.array([[0, 5], [0, -1]])}
        answers[name] = observe(profile, watch, ["O", "B-PER", "I-PER", "B-ORG", "I-ORG"], seen, outputs)
        assert profile.counts == {
            ("entity_type", "PER"): 1,
            ("entity_type", "ORG"): 1,
            ("entities_per_text", "2"): 1,
            ("entities_per_text", "0"): 1,
            ("chars", "1-16"): 2,
            ("reading", "windows"): 1,
            ("reading", "whole"): 1,
        }
    # The same entities read from either wire are the same answer: a shadow compares them as equal.
    assert [watch.key(a) for a in answers["native"]] == [watch.key(a) for a in answers["paddlenlp"]]


def test_a_label_set_counts_each_label_and_the_set_size():
    profile = Profile()
    labels = json.dumps([{"label": "stocks", "score": 0.9}, {"label": "science", "score": 0.7}]).encode()
    outputs = {"labels": np.array([labels, b"[]"], dtype=np.object_).reshape(2, 1)}
    observe(profile, WATCHES["multi_label"], LABELS, None, outputs)
    assert profile.counts == {
        ("label", "science"): 1,
        ("label", "stocks"): 1,
        ("labels_per_text", "2"): 1,
        ("labels_per_text", "0"): 1,
    }


def test_the_shadow_counts_agreement_and_flips_and_a_short_answer_as_failed():
    counts = Counts({})
    plan = ShadowPlan(model="news", serving_version=1, candidate="news_canary", version=2, fraction=1.0)
    mirror = Mirror.__new__(Mirror)  # its counting alone: no thread, no Triton
    mirror.plan, mirror.counts, mirror.watch, mirror.labels = plan, counts, WATCHES["sequence"], LABELS
    mirror.own = {"model": "news", "version": "1", "candidate": "2"}
    ours = [("sports", 0.9), ("stocks", 0.8), ("sports", 0.7)]
    theirs = [("sports", 0.6), ("science", 0.9), ("stocks", 0.7)]
    mirror.record(ours, theirs, 0.012)
    mirror.record(ours, theirs[:2], 0.012)
    own = mirror.own
    assert counts.value(SHADOW_METRIC, **own, outcome="agree") == 1
    assert counts.value(SHADOW_METRIC, **own, outcome="disagree") == 2
    assert counts.value(SHADOW_METRIC, **own, outcome="failed") == 3
    assert counts.value(SHADOW_FLIPS_METRIC, **own, serving_label="stocks", candidate_label="science") == 1
    assert counts.value(SHADOW_FLIPS_METRIC, **own, serving_label="sports", candidate_label="sports") == 1
    assert counts.value("ernie_deploy_shadow_candidate_seconds_bucket", **own, le="0.01") == 0
    assert counts.value("ernie_deploy_shadow_candidate_seconds_bucket", **own, le="0.025") == 1
    assert counts.value("ernie_deploy_shadow_candidate_seconds_bucket", **own, le="+Inf") == 1


def test_a_shadow_plan_refuses_a_fraction_that_is_no_share():
    from ernie_deploy.core.errors import BadOptionsError

    for fraction in (0, -0.1, 1.5):
        with pytest.raises(BadOptionsError, match="not a share"):
            ShadowPlan(model="news", serving_version=1, candidate="news_canary", version=2, fraction=fraction)
    plan = ShadowPlan(model="news", serving_version=1, candidate="news_canary", version=2)
    assert ShadowPlan.from_json(plan.to_json()) == plan
