"""Rows of different token lengths run in buckets of similar length, so that a merged batch pads each row to the
longest of its bucket, not of the whole batch.

A merged onnxruntime call costs what its padded rows cost: R rows of the longest row's L tokens. Texts of one batch
differ in length (MSRA NER's test sentences run from 3 to over 100 characters), and a UIE request multiplies its rows
by its schema's types and its texts' windows, so one long row makes every row of the call as long. Sorting the rows by
length and cutting the sorted run where the padding would pass `max_pad` times the real tokens bounds the waste, at
the price of one call per bucket (docs/BENCHMARKS.md, "Information extraction (UIE)", measures both)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ernie_deploy.core.errors import BadOptionsError

# The padded tokens a bucket may hold, over its real ones. 1.25 keeps at least 80% of the work real while letting
# rows a few tokens apart share a call (docs/BENCHMARKS.md, "Information extraction (UIE)": pad ratio per schema).
MAX_PAD = 1.25


def length_buckets(lengths: Sequence[int], max_pad: float = MAX_PAD, max_rows: int = 256) -> list[np.ndarray]:
    """The indices of `lengths` grouped into buckets, each in ascending length: a bucket's rows x its longest row
    stays within `max_pad` x the bucket's real tokens, and a bucket holds at most `max_rows` rows. Every index is
    in exactly one bucket; buckets come shortest first. O(n log n): one sort, one pass."""
    if max_pad < 1.0:
        raise BadOptionsError(f"max_pad {max_pad} is below 1: padding can only add tokens", "pass 1.0 or more")
    if max_rows < 1:
        raise BadOptionsError(f"max_rows {max_rows} would hold no row", "pass 1 or more")
    lengths = np.asarray(lengths, dtype=np.int64).reshape(-1)
    order = np.argsort(lengths, kind="stable")
    buckets, start, real = [], 0, 0
    for at, index in enumerate(order):
        length = max(int(lengths[index]), 1)  # an empty row still takes a position in a call
        count = at - start + 1  # rows, this one included; sorted, so this one is the bucket's longest
        if at > start and (count > max_rows or count * length > max_pad * (real + length)):
            buckets.append(order[start:at])
            start, real = at, 0
        real += length
    if len(order):
        buckets.append(order[start:])
    return buckets


@dataclass(frozen=True)
class Padding:
    """Tokens the calls ran (each call's rows x its longest row) and the rows' real tokens."""

    run: int = 0
    real: int = 0

    def __add__(self, other: Padding) -> Padding:
        return Padding(self.run + other.run, self.real + other.real)

    @property
    def ratio(self) -> float:
        return self.run / self.real if self.real else 1.0

    @classmethod
    def of(cls, lengths: Sequence[int], buckets: Sequence[np.ndarray]) -> Padding:
        lengths = np.maximum(np.asarray(lengths, dtype=np.int64).reshape(-1), 1)
        return cls(sum(len(b) * int(lengths[b].max()) for b in buckets if len(b)), int(lengths.sum()))


def run_in_buckets(
    run: Callable[[np.ndarray, np.ndarray], Sequence[np.ndarray]],
    input_ids: np.ndarray,
    token_type_ids: np.ndarray,
    lengths: Sequence[int],
    *,
    max_pad: float = MAX_PAD,
    max_rows: int = 256,
) -> tuple[list[np.ndarray], Padding]:
    """`run(ids, types)` (a model's outputs, each [rows, tokens, ...]) over rows padded to their batch's longest,
    called once per length bucket on the bucket's rows cut to its longest; its outputs put back in row order at the
    batch's width, zeros past each bucket's width. Returns (outputs, the padding of the calls made). A row's tokens past
    its length must be padding the model masks out: then its outputs do not depend on its bucket."""
    lengths = np.asarray(lengths, dtype=np.int64).reshape(-1)
    rows, width = input_ids.shape
    buckets = length_buckets(lengths, max_pad, max_rows)
    outputs: list[np.ndarray] | None = None
    for bucket in buckets:
        cut = max(int(lengths[bucket].max()), 1)
        parts = run(input_ids[bucket, :cut], token_type_ids[bucket, :cut])
        if outputs is None:
            outputs = [np.zeros((rows, width, *p.shape[2:]), dtype=p.dtype) for p in parts]
        for out, part in zip(outputs, parts):
            out[bucket, : part.shape[1]] = part
    if outputs is None:  # no rows: the model's outputs for none, at their shape
        outputs = list(run(input_ids, token_type_ids))
    return outputs, Padding.of(lengths, buckets)
