"""Texts longer than the model's window: windows over the whole token sequence (sliding, or whole sentences packed),
and their merge; the head+tail cut for classifiers.

Pure functions of token ids, offsets and logits (numpy only), shared by the serving steps and the offline
references (ONNX and Paddle-native), so that the window a token is decided in never depends on who runs it. The
tokenization they start from is serving.encoding's.

A text's whole sequence is `[CLS] t_0 ... t_{n-1} [SEP]`, tokenized once, untruncated. With `size` = max_seq_len - 2
real tokens per window, window k holds `[CLS] t_s ... t_{s+size-1} [SEP]` for its start s. The windows start every
`stride` tokens; the last one ends on the text's last token, so every window is full and every token is in one.

Sentence windows (`sentence_windows`) cut the text at sentence ends instead and pack whole sentences into windows of
up to `size` real tokens; only a sentence longer than a window is read in sliding windows of its own, so a token goes
through the model about once. Either way a window is its start and end among the text's real tokens, and the merge
needs nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ernie_deploy.core.errors import BadOptionsError, BadRepositoryError, BadRequest

# How a long text is cut into windows: whole sentences packed (the default: docs/LONG_TEXTS.md measures both), or
# windows of one size sliding by a stride.
CUTS = ("sentences", "sliding")
DEFAULT_CUT = "sentences"
# What a refusal of window logits that do not fit their windows tells: the two steps were built apart.
_ONE_BUILD = "rebuild the model so its tokenizer and model steps come from one build"


def recorded_cut(window_cut: str | None) -> str:
    """How a model record's windows are cut: as it says (a record `build` made holds the cut of the windows it
    reads); a record `build` has not completed reads as `build` cuts by default."""
    return window_cut or DEFAULT_CUT


def check_cut(cut: str) -> str:
    if cut not in CUTS:
        raise BadOptionsError(f"unknown --window-cut {cut!r}", f"use one of {', '.join(CUTS)}")
    return cut


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
        raise BadOptionsError(
            f"window stride {stride} must be from 1 to the window's {size} real tokens",
            "pass --window-stride from 1 to --window-size",
        )
    if tokens <= size:
        return [0]
    last = tokens - size
    return [*range(0, last, stride), last]


def window_rows(ids: Sequence[int], starts: Sequence[int], ends: Sequence[int], cls_id: int, sep_id: int) -> list:
    """The model's input per window: [CLS] ids[s : e] [SEP] (ids: the real tokens, no specials)."""
    ids = list(ids)
    return [[cls_id, *ids[s:e], sep_id] for s, e in zip(starts, ends)]


# Where a sentence ends: the full-width and ASCII marks of a sentence's (or a clause list's) end, then any closing
# quotes or brackets that follow them; a line break ends one too. A comma does not: MSRA's test sentences (the
# documents of docs/LONG_TEXTS.md) end in these marks, and a clause read without the rest of its sentence loses
# the context that tells a name from a word.
SENTENCE_ENDS = frozenset("。！？；!?")
CLOSERS = frozenset("”’」』）)】》\"'")
LINE_BREAKS = frozenset("\n\r\u2028\u2029")


def sentence_starts(text: str, offsets: Sequence) -> list[int]:
    """Index of each sentence's first real token (0 first), from the text and its tokens' character spans: a
    sentence ends after a token whose text ends in SENTENCE_ENDS (and the CLOSERS after it), or before a line
    break. One pass over the characters: whether the text so far ends in a mark and closers is carried along, never
    looked back for (a run of closers looked back over from each of its tokens grew with its square)."""
    starts = [0]
    spans = [(int(a), int(b)) for a, b in offsets]
    ended = False  # the text read so far ends in an end mark and the closers after it
    for i in range(len(spans) - 1):
        (start, end), following = spans[i], spans[i + 1][0]
        for ch in text[start:end]:
            ended = ch in SENTENCE_ENDS or (ended and ch in CLOSERS)
        gap = text[end:following]
        after = text[following] if following < len(text) else ""
        # the end marks and closers that follow stay with this sentence
        if any(ch in LINE_BREAKS for ch in gap) or (ended and after not in SENTENCE_ENDS and after not in CLOSERS):
            starts.append(i + 1)
            ended = False
            continue
        for ch in gap:  # what lies between tokens (spaces) ends no run of closers after a mark
            ended = ch in SENTENCE_ENDS or (ended and ch in CLOSERS)
    return starts


def sentence_windows(
    tokens: int, starts_of_sentences: Sequence[int], size: int, stride: int
) -> tuple[list[int], list[int]]:
    """(starts, ends) of windows over `tokens` real tokens that pack whole sentences, in order, into windows of at
    most `size` tokens; a sentence longer than `size` gets sliding windows of its own (`window_starts` within it),
    the only place where windows overlap. A text of no tokens gets one empty window."""
    if size < 1 or not 1 <= stride <= size:
        raise BadOptionsError(
            f"window stride {stride} must be from 1 to the window's {size} real tokens",
            "pass --window-stride from 1 to --window-size",
        )
    if tokens == 0:
        return [0], [0]
    bounds = [*sorted({s for s in starts_of_sentences if 0 <= s < tokens} | {0}), tokens]
    starts, ends = [], []
    open_start = open_end = None
    for a, b in zip(bounds, bounds[1:]):
        if open_start is not None and b - open_start <= size:
            open_end = b  # this sentence fits beside the open window's ones
            continue
        if open_start is not None:
            starts.append(open_start)
            ends.append(open_end)
            open_start = None
        if b - a <= size:
            open_start, open_end = a, b
        else:
            for s in window_starts(b - a, size, stride):
                starts.append(a + s)
                ends.append(a + s + size)
    if open_start is not None:
        starts.append(open_start)
        ends.append(open_end)
    return starts, ends


def deciding_window(tokens: int, starts: Sequence[int], ends: Sequence[int]) -> np.ndarray:
    """int [tokens]: for each real token, the window whose logits decide it: the one where it sits furthest from
    an edge that cuts the text. A window's edge at the text's own start or end cuts nothing (the token has all the
    context there is on that side), so it does not count. Ties go to the earlier window. Windows: [start, end) among
    the real tokens, starts and ends increasing (sliding windows and sentence windows both are)."""
    if tokens == 0:
        return np.zeros(0, dtype=np.int64)
    starts_arr = np.asarray(starts, dtype=np.int64)
    ends = np.minimum(np.asarray(ends, dtype=np.int64), tokens)  # exclusive
    position = np.arange(tokens)
    # Only the windows that hold a token can decide it, and with increasing starts (and ends) those are a run of
    # consecutive windows: from the first that ends after it to the last that starts at or before it. Scoring those
    # alone costs tokens x (windows per token), linear in the text; a [windows, tokens] table grew with its square
    # (a 300,000-character text took 18 GB).
    first = np.searchsorted(ends, position, side="right")
    count = np.searchsorted(starts_arr, position, side="right") - first
    candidates = first[None, :] + np.arange(max(int(count.max()), 1))[:, None]  # [most windows per token, tokens]
    inside = candidates < (first + count)[None, :]
    candidates = np.minimum(candidates, len(starts_arr) - 1)
    own_start, own_end = starts_arr[candidates], ends[candidates]
    big = tokens + 1  # farther than any real distance
    left = np.where(own_start > 0, position - own_start, big)
    right = np.where(own_end < tokens, own_end - 1 - position, big)
    margin = np.where(inside, np.minimum(left, right), -1)
    return candidates[margin.argmax(axis=0), position]


def merge_window_logits(
    window_logits: np.ndarray, starts: Sequence[int], ends: Sequence[int], tokens: int
) -> np.ndarray:
    """Logits of the whole sequence [tokens + 2, C] ([CLS] t_0 .. t_{n-1} [SEP]) from the windows' logits
    [W, >= width, C] (each row [CLS] t_s .. t_{e-1} [SEP], possibly padded): each token's row comes from its
    deciding window. [CLS] takes the first window's, [SEP] the last window's."""
    window_logits = np.asarray(window_logits)
    starts, ends = list(starts), list(ends)
    if window_logits.ndim != 3 or window_logits.shape[0] < len(starts) or len(ends) != len(starts):
        raise BadRepositoryError(
            f"window logits {list(window_logits.shape)} do not cover {len(starts)} windows of [tokens, labels]",
            _ONE_BUILD,
        )
    merged = np.empty((tokens + 2, window_logits.shape[-1]), dtype=window_logits.dtype)
    merged[0] = window_logits[0, 0]
    if tokens:
        window = deciding_window(tokens, starts, ends)
        position = np.arange(tokens)
        # +1: row 0 of a window is its [CLS]
        merged[1 : tokens + 1] = window_logits[window, position - np.asarray(starts)[window] + 1]
    last = len(starts) - 1
    merged[tokens + 1] = window_logits[last, min(tokens, ends[last]) - starts[last] + 1]
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
    window_ends                  int64 [B, W]     one past each window's last real token; -1: no window
    text_offsets                 int64 [B, T, 2]  the whole sequence's character spans (as `Encoded.offsets`)
    text_lengths                 int64 [B]        the whole sequence's tokens, [CLS] and [SEP] included
    """

    def __init__(self, window_ids, window_type_ids, window_starts, window_ends, text_offsets, text_lengths):
        self.window_ids = window_ids
        self.window_type_ids = window_type_ids
        self.window_starts = window_starts
        self.window_ends = window_ends
        self.text_offsets = text_offsets
        self.text_lengths = text_lengths


def text_windows(
    ids: Sequence[int], offsets: Sequence, size: int, stride: int, text: str | None = None
) -> tuple[list[int], list[int]]:
    """(starts, ends) of one text's windows: whole sentences packed when its text is given, else sliding."""
    if text is None:
        starts = window_starts(len(ids), size, stride)
        return starts, [min(s + size, len(ids)) for s in starts]
    return sentence_windows(len(ids), sentence_starts(text, offsets), size, stride)


def windows_from_tokens(
    ids: Sequence[Sequence[int]],
    offsets: Sequence[Sequence],
    size: int,
    stride: int,
    cls_id: int,
    sep_id: int,
    pad_id: int,
    texts: Sequence[str] | None = None,
) -> Windowed:
    """`Windowed` from each text's real token ids and offsets (no specials), whoever tokenized them: sliding
    windows, or, given the texts, windows of whole sentences (`sentence_windows`)."""
    batch = len(ids)
    spans = [
        text_windows(row, offs, size, stride, None if texts is None else texts[b])
        for b, (row, offs) in enumerate(zip(ids, offsets))
    ]
    count = max((len(s) for s, _ in spans), default=0)
    width = max((max(e - s for s, e in zip(*own)) + 2 for own in spans), default=0)
    window_ids = np.full((batch, count, width), pad_id, dtype=np.int64)
    window_starts_arr = np.full((batch, count), -1, dtype=np.int64)
    window_ends_arr = np.full((batch, count), -1, dtype=np.int64)
    longest = max((len(row) + 2 for row in ids), default=0)
    text_offsets = np.zeros((batch, longest, 2), dtype=np.int64)
    for b, (row, text_spans, (own, own_ends)) in enumerate(zip(ids, offsets, spans)):
        for w, window in enumerate(window_rows(row, own, own_ends, cls_id, sep_id)):
            window_ids[b, w, : len(window)] = window
        window_starts_arr[b, : len(own)] = own
        window_ends_arr[b, : len(own)] = own_ends
        if len(text_spans):
            text_offsets[b, 1 : len(text_spans) + 1] = np.asarray(text_spans, dtype=np.int64).reshape(-1, 2)
    lengths = np.array([len(row) + 2 for row in ids], dtype=np.int64)
    return Windowed(window_ids, np.zeros_like(window_ids), window_starts_arr, window_ends_arr, text_offsets, lengths)


def merge_windows(
    window_logits: np.ndarray, window_starts: np.ndarray, window_ends: np.ndarray, text_lengths: np.ndarray
) -> np.ndarray:
    """Whole-sequence logits [B, T, C] (T: the longest text_lengths; rows past a text's length: zeros) from the
    windows' logits [B, W, L, C] of a batch; see `merge_window_logits`."""
    window_logits = np.asarray(window_logits)
    lengths = np.asarray(text_lengths).reshape(-1)
    starts = np.asarray(window_starts).reshape(len(lengths), -1)
    ends = np.asarray(window_ends).reshape(len(lengths), -1)
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
        real = starts[b] >= 0
        own, own_ends = [int(s) for s in starts[b][real]], [int(e) for e in ends[b][real]]
        if not own:
            raise BadRequest(f"text {b} has no window", "send the tokenizer's window_starts unchanged")
        tokens = length - 2
        widest = max(e - s for s, e in zip(own, own_ends))
        if window_logits.shape[2] < widest + 2:
            raise BadRepositoryError(
                f"window logits of {window_logits.shape[2]} tokens cannot hold text {b}'s windows of {widest} tokens",
                _ONE_BUILD,
            )
        merged[b, :length] = merge_window_logits(window_logits[b], own, own_ends, tokens)
    return merged
