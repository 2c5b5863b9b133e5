"""Texts longer than the model's window: sliding windows over the whole token sequence, and their merge; the
head+tail cut for classifiers.

Pure functions of token ids, offsets and logits (numpy only), shared by the serving steps and the offline
references (ONNX and Paddle-native), so that the window a token is decided in never depends on who runs it. The
tokenization they start from is serving.encoding's.

A text's whole sequence is `[CLS] t_0 ... t_{n-1} [SEP]`, tokenized once, untruncated. With `size` = max_seq_len - 2
real tokens per window, window k holds `[CLS] t_s ... t_{s+size-1} [SEP]` for its start s. The windows start every
`stride` tokens; the last one ends on the text's last token, so every window is full and every token is in one.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ernie_deploy.core.errors import BadOptionsError, ErnieDeployError


def default_stride(max_seq_len: int) -> int:
    """Half a window: every token then sits at least a quarter window from a cut edge in the window that decides
    it (docs/LONG_TEXTS.md measures the stride against F1 and time)."""
    return max(1, (max_seq_len - 2) // 2)


def default_head_tokens(max_seq_len: int) -> int:
    """A quarter of the kept tokens from the head, the rest from the tail: Sun et al. (2019, "How to Fine-Tune BERT
    for Text Classification") found 128 head + 382 tail tokens of 510 best on long news and reviews, where the
    tail carries the conclusion; (510 // 4 = 127 keeps their ratio at any max_seq_len)."""
    return (max_seq_len - 2) // 4


def check_stride(stride: int, max_seq_len: int) -> None:
    size = max_seq_len - 2
    if not 1 <= stride <= size:
        raise BadOptionsError(
            f"a window stride of {stride} tokens does not fit windows of {size} real tokens (max_seq_len "
            f"{max_seq_len} less [CLS] and [SEP]): 0 would never move and more than {size} would skip tokens",
            f"pass --window-stride from 1 to {size}, or leave it out for half a window ({default_stride(max_seq_len)})",
        )


def check_head_tokens(head: int, max_seq_len: int) -> None:
    size = max_seq_len - 2
    if not 0 <= head <= size:
        raise BadOptionsError(
            f"--head-tokens {head} does not fit the {size} real tokens a text keeps (max_seq_len {max_seq_len})",
            f"pass 0 (the tail alone) to {size} (the head alone), or leave it out for "
            f"{default_head_tokens(max_seq_len)}",
        )


def window_starts(tokens: int, size: int, stride: int) -> list[int]:
    """Start of each window over `tokens` real tokens, `size` real tokens a window, one every `stride` tokens; the
    last window ends on the last token. A text that fits gets one window at 0 (an empty text too)."""
    if size < 1 or not 1 <= stride <= size:
        raise ErnieDeployError(f"window stride {stride} must be from 1 to the window's {size} real tokens")
    if tokens <= size:
        return [0]
    last = tokens - size
    return [*range(0, last, stride), last]


def window_rows(ids: Sequence[int], starts: Sequence[int], size: int, cls_id: int, sep_id: int) -> list[list[int]]:
    """The model's input per window: [CLS] ids[s : s + size] [SEP] (ids: the real tokens, no specials)."""
    ids = list(ids)
    return [[cls_id, *ids[s : s + size], sep_id] for s in starts]


def deciding_window(tokens: int, starts: Sequence[int], size: int) -> np.ndarray:
    """int [tokens]: for each real token, the window whose logits decide it: the one where it sits furthest from
    an edge that cuts the text. A window's edge at the text's own start or end cuts nothing (the token has all the
    context there is on that side), so it does not count. Ties go to the earlier window."""
    if tokens == 0:
        return np.zeros(0, dtype=np.int64)
    starts_arr = np.asarray(starts, dtype=np.int64)
    ends = np.minimum(starts_arr + size, tokens)  # exclusive
    position = np.arange(tokens)
    # Only the windows that hold a token can decide it, and with increasing starts (and so ends) those are a run of
    # consecutive windows: from the first that ends after it to the last that starts at or before it. Scoring those
    # alone costs tokens x (windows per token), linear in the text; a [windows, tokens] table grew with its square
    # (a 300,000-character text took 18 GB).
    first = np.searchsorted(ends, position, side="right")
    count = np.searchsorted(starts_arr, position, side="right") - first
    candidates = first[None, :] + np.arange(max(int(count.max()), 1))[:, None]  # [most windows per token, tokens]
    inside = candidates < (first + count)[None, :]
    candidates = np.minimum(candidates, len(starts_arr) - 1)
    own_start, own_end = starts_arr[candidates], ends[candidates]
    big = tokens + size  # farther than any real distance
    left = np.where(own_start > 0, position - own_start, big)
    right = np.where(own_end < tokens, own_end - 1 - position, big)
    margin = np.where(inside, np.minimum(left, right), -1)
    return candidates[margin.argmax(axis=0), position]


def merge_window_logits(window_logits: np.ndarray, starts: Sequence[int], tokens: int, size: int) -> np.ndarray:
    """Logits of the whole sequence [tokens + 2, C] ([CLS] t_0 .. t_{n-1} [SEP]) from the windows' logits
    [W, >= width, C] (each row [CLS] t_s .. [SEP], possibly padded): each token's row comes from its deciding window.
    [CLS] takes the first window's, [SEP] the last window's."""
    window_logits = np.asarray(window_logits)
    starts = list(starts)
    if window_logits.ndim != 3 or window_logits.shape[0] < len(starts):
        raise ErnieDeployError(
            f"window logits {list(window_logits.shape)} do not cover {len(starts)} windows of [tokens, labels]"
        )
    merged = np.empty((tokens + 2, window_logits.shape[-1]), dtype=window_logits.dtype)
    merged[0] = window_logits[0, 0]
    if tokens:
        window = deciding_window(tokens, starts, size)
        position = np.arange(tokens)
        # +1: row 0 of a window is its [CLS]
        merged[1 : tokens + 1] = window_logits[window, position - np.asarray(starts)[window] + 1]
    last = len(starts) - 1
    merged[tokens + 1] = window_logits[last, min(tokens - starts[last], size) + 1]
    return merged


def head_tail_keep(tokens: int, keep: int, head: int) -> tuple[int, int]:
    """(head, tail) token counts a text of `tokens` real tokens keeps when `keep` fit: the first `head` and the
    last `keep - head`; all of a text that fits."""
    if tokens <= keep:
        return tokens, 0
    return head, keep - head


def head_tail_ids(ids: Sequence, keep: int, head: int) -> list:
    """The kept tokens (ids, or offsets, of the real tokens) of a head+tail cut."""
    first, last = head_tail_keep(len(ids), keep, head)
    ids = list(ids)
    return ids[:first] + (ids[len(ids) - last :] if last else [])


class Windowed:
    """Texts as windows, as numpy arrays (B texts; W: the most windows of one text; L: the longest window;
    T: the longest text, [CLS] and [SEP] included).

    window_ids, window_type_ids  int64 [B, W, L]  [CLS] tokens [SEP] per window; pad rows and columns: the pad id
    window_starts                int64 [B, W]     each window's first token in the text's real tokens; -1: no window
    text_offsets                 int64 [B, T, 2]  the whole sequence's character spans (as `Encoded.offsets`)
    text_lengths                 int64 [B]        the whole sequence's tokens, [CLS] and [SEP] included
    """

    def __init__(self, window_ids, window_type_ids, window_starts, text_offsets, text_lengths):
        self.window_ids = window_ids
        self.window_type_ids = window_type_ids
        self.window_starts = window_starts
        self.text_offsets = text_offsets
        self.text_lengths = text_lengths


def windows_from_tokens(
    ids: Sequence[Sequence[int]],
    offsets: Sequence[Sequence],
    size: int,
    stride: int,
    cls_id: int,
    sep_id: int,
    pad_id: int,
) -> Windowed:
    """`Windowed` from each text's real token ids and offsets (no specials), whoever tokenized them."""
    batch = len(ids)
    starts = [window_starts(len(row), size, stride) for row in ids]
    count = max((len(s) for s in starts), default=0)
    width = max((min(len(row), size) + 2 for row in ids), default=0)
    window_ids = np.full((batch, count, width), pad_id, dtype=np.int64)
    window_starts_arr = np.full((batch, count), -1, dtype=np.int64)
    longest = max((len(row) + 2 for row in ids), default=0)
    text_offsets = np.zeros((batch, longest, 2), dtype=np.int64)
    for b, (row, spans, own) in enumerate(zip(ids, offsets, starts)):
        for w, window in enumerate(window_rows(row, own, size, cls_id, sep_id)):
            window_ids[b, w, : len(window)] = window
        window_starts_arr[b, : len(own)] = own
        if len(spans):
            text_offsets[b, 1 : len(spans) + 1] = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
    lengths = np.array([len(row) + 2 for row in ids], dtype=np.int64)
    return Windowed(window_ids, np.zeros_like(window_ids), window_starts_arr, text_offsets, lengths)


def merge_windows(window_logits: np.ndarray, window_starts: np.ndarray, text_lengths: np.ndarray) -> np.ndarray:
    """Whole-sequence logits [B, T, C] (T: the longest text_lengths; rows past a text's length: zeros) from the
    windows' logits [B, W, L, C] of a batch; see `merge_window_logits`. The window size is read from each text's
    own windows: the last one ends on the last token and is full, so size = tokens - its start (a text of one
    window is whole in it)."""
    window_logits = np.asarray(window_logits)
    lengths = np.asarray(text_lengths).reshape(-1)
    starts = np.asarray(window_starts).reshape(len(lengths), -1)
    longest = int(lengths.max()) if len(lengths) else 0
    merged = np.zeros((len(lengths), longest, window_logits.shape[-1]), dtype=window_logits.dtype)
    # A text of one window (most texts) is its window: copied for all of them at once.
    single = (starts[:, 1:] < 0).all(axis=1) if starts.shape[1] > 1 else np.ones(len(lengths), dtype=bool)
    rows = np.flatnonzero(single & (starts[:, 0] == 0))
    width = min(longest, window_logits.shape[2])
    merged[rows, :width] = window_logits[rows, 0, :width]
    merged[rows] *= (np.arange(longest)[None, :] < lengths[rows, None])[..., None]
    done = set(rows.tolist())
    for b, length in enumerate(lengths.tolist()):
        if b in done:
            continue
        own = [int(s) for s in starts[b] if s >= 0]
        if not own:
            raise ErnieDeployError(f"text {b} has no window", "send the tokenizer's window_starts unchanged")
        tokens = length - 2
        size = tokens - own[-1] if len(own) > 1 else max(tokens, 1)
        if window_logits.shape[2] < min(size, tokens) + 2:
            raise ErnieDeployError(
                f"window logits of {window_logits.shape[2]} tokens cannot hold text {b}'s windows of {size} tokens"
            )
        merged[b, :length] = merge_window_logits(window_logits[b], own, tokens, size)
    return merged
