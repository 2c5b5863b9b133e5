"""serving.buckets: rows grouped by token length so a merged call's padding stays bounded, and the outputs of the
bucketed calls put back in row order."""

from __future__ import annotations

import numpy as np
import pytest

from ernie_deploy.core.errors import BadOptionsError
from ernie_deploy.serving.buckets import MAX_PAD, Padding, length_buckets, run_in_buckets


def _check(lengths, buckets, max_pad, max_rows):
    lengths = np.maximum(np.asarray(lengths), 1)
    flat = np.concatenate(buckets) if buckets else np.array([], dtype=np.int64)
    assert sorted(flat.tolist()) == list(range(len(lengths)))  # every row once
    for b in buckets:
        assert 1 <= len(b) <= max_rows
        assert len(b) * lengths[b].max() <= max_pad * lengths[b].sum() + 1e-9


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("max_pad, max_rows", [(MAX_PAD, 256), (1.0, 256), (2.0, 4), (1.1, 1)])
def test_every_bucket_bounded(seed, max_pad, max_rows):
    lengths = np.random.default_rng(seed).integers(0, 130, size=300)
    buckets = length_buckets(lengths, max_pad, max_rows)
    _check(lengths, buckets, max_pad, max_rows)
    assert Padding.of(lengths, buckets).ratio <= max_pad + 1e-9


def test_equal_lengths_share_one_call_and_a_long_row_runs_apart():
    assert [b.tolist() for b in length_buckets([20, 20, 20, 20])] == [[0, 1, 2, 3]]
    # One long row among short ones: padded together the call would run 5 x 120 tokens for 200 real.
    buckets = length_buckets([20, 20, 120, 20, 20])
    assert [b.tolist() for b in buckets] == [[0, 1, 3, 4], [2]]
    assert Padding.of([20, 20, 120, 20, 20], buckets).ratio == 1.0
    assert Padding.of([20, 20, 120, 20, 20], [np.arange(5)]).ratio == 3.0


def test_no_rows_and_bad_bounds():
    assert length_buckets([]) == []
    assert Padding().ratio == 1.0
    with pytest.raises(BadOptionsError, match="below 1"):
        length_buckets([3], max_pad=0.9)
    with pytest.raises(BadOptionsError, match="no row"):
        length_buckets([3], max_rows=0)


def _model(ids, types):
    """A stand-in model whose outputs at each position depend only on that row's real tokens (pad id 0 masked),
    as an exported model's do: a cumulative sum, and a per-row total broadcast over the positions."""
    kept = ids * (ids != 0)
    total = np.broadcast_to(kept.sum(1, keepdims=True), ids.shape)[..., None]
    return [np.cumsum(kept, axis=1).astype(np.float32), total + types[..., None]]


def test_outputs_back_in_row_order_as_one_padded_call_gives():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 40, size=50)
    width = int(lengths.max())
    ids = np.zeros((50, width), dtype=np.int64)
    for r, n in enumerate(lengths):
        ids[r, :n] = rng.integers(1, 100, size=n)
    types = np.zeros_like(ids)
    calls = []

    def run(i, t):
        calls.append(i.shape)
        return _model(i, t)

    (cumsum, total), padding = run_in_buckets(run, ids, types, lengths)
    whole_cumsum, whole_total = _model(ids, types)
    assert len(calls) > 1 and all(shape[1] <= width for shape in calls)
    for r, n in enumerate(lengths):  # each row's real positions as the one padded call gives them
        np.testing.assert_array_equal(cumsum[r, :n], whole_cumsum[r, :n])
        np.testing.assert_array_equal(total[r, :n], whole_total[r, :n])
    assert cumsum.shape == (50, width) and total.shape == (50, width, 1)
    assert padding.real == int(lengths.sum()) and padding.ratio <= MAX_PAD
    assert padding.run == sum(shape[0] * shape[1] for shape in calls)
