"""Accuracy gates cannot flip on float rounding (issue 23): scores that are a fraction of n texts compare as counts
of texts, F1 scores with gates.SCORE_ROUNDING to spare."""

from __future__ import annotations

import pytest

from ernie_deploy.evaluate.metrics import FORMATTERS
from ernie_deploy.export.gates import (
    COUNTED_METRICS,
    SCORE_ROUNDING,
    at_least,
    count_of,
    counted,
    drop_within,
    within,
)


def _f1(tp: int, fp: int, fn: int) -> float:
    """F1 from precision and recall, as seqeval computes it: 2PR/(P+R), in floats."""
    precision, recall = tp / (tp + fp), tp / (tp + fn)
    return 2 * precision * recall / (precision + recall)


def test_one_text_of_a_thousand_is_a_tenth_of_a_point():
    assert abs(0.828 - 0.827) > 0.001  # the float difference that failed the FP16 gate on a clean run
    assert within(0.828, 0.827, 0.001, n=1000) and within(0.827, 0.828, 0.001, n=1000)
    assert not within(0.828, 0.826, 0.001, n=1000) and not within(0.826, 0.828, 0.001, n=1000)
    assert within(0.828, 0.828, 0.0, n=1000) and not within(0.828, 0.827, 0.0, n=1000)


def test_points_round_down_to_whole_texts():
    assert not within(828 / 999, 827 / 999, 0.001, n=999)  # a tenth of a point of 999 texts is no whole text
    assert within(1657 / 2000, 1655 / 2000, 0.001, n=2000)  # 2 texts of 2,000
    assert not within(1657 / 2000, 1654 / 2000, 0.001, n=2000)


def test_one_point_lost_is_ten_texts_and_a_gain_always_passes():
    assert drop_within(0.828, 0.818, 0.01, n=1000) and not drop_within(0.828, 0.817, 0.01, n=1000)
    assert drop_within(0.828, 0.95, 0.01, n=1000) and not within(0.828, 0.95, 0.01, n=1000)
    assert drop_within(0.29, 0.28, 0.01, n=100)  # 0.29 * 100 is 28.999999999999996: counts round, never cut


def test_a_count_floor_is_reached_exactly():
    assert at_least(0.81, 0.81, n=1000) and not at_least(0.809, 0.81, n=1000)
    assert at_least(810 / 999, 0.81, n=999) and not at_least(809 / 999, 0.81, n=999)  # 809.19 texts: 810 needed


def test_f1_at_exactly_the_tolerance_passes_and_past_it_fails():
    assert abs(0.6614 - 0.6604) > 0.001  # exactly a tenth of a point, a hair more in floats
    assert within(0.6614, 0.6604, 0.001) and within(0.6604, 0.6614, 0.001)
    assert not within(0.6614, 0.6604 - 2 * SCORE_ROUNDING, 0.001)
    assert not within(0.6614, 0.6603, 0.001)
    assert drop_within(0.6614, 0.6514, 0.01) and not drop_within(0.6614, 0.6513, 0.01)


def test_an_f1_floor_survives_its_float_rounding():
    f1 = _f1(66, 2, 66)  # 132 / 200: exactly 0.66, one float step under it when computed from P and R
    assert f1 < 0.66
    assert at_least(f1, 0.66) and not at_least(0.66 - 2 * SCORE_ROUNDING, 0.66)


def test_only_fractions_of_the_texts_are_counted():
    assert count_of(0.827, 1000) == 827 and count_of(1 / 3, 3) == 1
    for score, n in ((0.8271, 1000), (1 / 3, 1000)):
        with pytest.raises(ValueError, match="not a fraction of"):
            count_of(score, n)
    with pytest.raises(ValueError):
        within(0.8271, 0.827, 0.001, n=1000)  # an F1 given a count of texts
    assert counted({"metric": "accuracy", "n": 1000}) == 1000
    assert counted({"metric": "f1", "n": 5000}) is None and counted({"metric": "micro_f1", "n": 5000}) is None
    assert COUNTED_METRICS <= set(FORMATTERS)  # names a metric the reports use
