"""Texts -> the model's inputs, cut the one way the tokenizer step serves them.

Every consumer of a model's inputs calls `encode_items`: the tokenizer step inside Triton, and outside it the
parity and drift gates, the INT8 calibration, the offline evaluation and the in-process bench. So what a gate
checks is what the server feeds the model, for texts that fit and for texts that do not.

Each text is tokenized once, whole and without [CLS]/[SEP] (`encode_whole`), and cut here, never by the Rust
tokenizer's own truncation:
- a text: its first max_seq_len - 2 real tokens (the ids ErnieTokenizer gives with truncation), or with
  `head_tokens` the first head_tokens and the last max_seq_len - 2 - head_tokens (serving.windows.head_tail_ids);
- a pair: one token at a time from the longer text, as ErnieTokenizer cuts it (`pair_lengths`);
- windows over the whole text, for the token models that read them (`encode_windows`, serving.windows).

Only numpy and `tokenizers`: this module runs inside Triton's python backend.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np
from tokenizers import Encoding, Tokenizer

from ernie_deploy.core.errors import BadOptionsError, BadRequest
from ernie_deploy.serving.tokenizer import CLS, PAD, SEP
from ernie_deploy.serving.windows import Windowed, check_head_tokens, check_stride, head_tail_ids, windows_from_tokens

_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass
class Encoded:
    """A tokenized batch, as numpy arrays. B texts, padded to L, the longest in the batch (<= max_seq_len).

    input_ids       int64 [B, L]     [CLS] tokens [SEP], then the pad id
    token_type_ids  int64 [B, L]     0 (single texts)
    offsets         int64 [B, L, 2]  per token, [start, end) in the ORIGINAL Python string, in code points
                                     (text[start:end]); (0, 0) for [CLS], [SEP] and padding.
    lengths         int64 [B]        real tokens per row, [CLS] and [SEP] included
    truncated       bool  [B]        the text had more tokens than fit in max_seq_len

    Offsets where normalization changes the text: a token's span is the original characters it was made
    from, so text[start:end], lowercased with accents stripped, is the token without its "##" (an [UNK]
    spans the word it replaced), even where lengths differ ("İ" -> "i"). A character that becomes several
    pieces (a Hangul syllable becomes its jamo: "서" -> "ᄉ", "##ᅥ") gives each the whole character's span.
    Characters that make nothing - whitespace, removed controls, combining marks dropped with the accents
    ("e" U+0301 -> "e" spans only the "e") - lie in no span, unless they sit inside a piece of several
    characters. Pieces of one word ("iphone", "##15") have adjacent spans. Full-width forms are not
    folded (ErnieTokenizer keeps them), so they map one to one.
    """

    input_ids: np.ndarray
    token_type_ids: np.ndarray
    offsets: np.ndarray
    lengths: np.ndarray
    truncated: np.ndarray

    @property
    def attention_mask(self) -> np.ndarray:
        """int64 [B, L]: 1 on real tokens, 0 on padding."""
        return (np.arange(self.input_ids.shape[1]) < self.lengths[:, None]).astype(np.int64)


# ----------------------------------------------------------------------------------------------------
# The one tokenization


def tokenize_whole(tokenizer: Tokenizer, texts: Sequence[str]) -> list[Encoding]:
    """Each text's real tokens, untruncated, unpadded and without [CLS]/[SEP]: what every cut is taken from."""
    texts = list(texts)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise BadRequest(f"text {i} is {type(text).__name__}, not str", "decode bytes as UTF-8 first")
    # Whatever a loaded tokenizer.json or an earlier caller set: every text whole, cut and padded here.
    if tokenizer.truncation is not None:
        tokenizer.no_truncation()
    if tokenizer.padding is not None:
        tokenizer.no_padding()
    try:
        return tokenizer.encode_batch(texts, add_special_tokens=False)
    except TypeError:
        # A lone surrogate (e.g. from decoding with errors="surrogateescape") cannot cross into Rust. ErnieTokenizer
        # drops it (category Cs); U+FFFD is dropped too and keeps every offset in place. Replaced only on failure:
        # scanning every text costs more than the rare retry.
        return tokenizer.encode_batch([_SURROGATE.sub("\ufffd", t) for t in texts], add_special_tokens=False)


def encode_whole(tokenizer: Tokenizer, texts: Sequence[str]) -> list[tuple[list[int], list[tuple[int, int]]]]:
    """(ids, offsets) of each text's real tokens, untruncated (see `tokenize_whole`)."""
    return [(e.ids, e.offsets) for e in tokenize_whole(tokenizer, texts)]


# ----------------------------------------------------------------------------------------------------
# The cuts


def encode_items(
    tokenizer: Tokenizer,
    items: Sequence[str | tuple[str, str]],
    max_seq_len: int,
    *,
    head_tokens: int | None = None,
    pad_to_multiple_of: int = 1,
    whole: list | None = None,
) -> Encoded:
    """A model's inputs as the tokenizer step cuts them: texts (`encode_batch`), or (text, text_pair) tuples
    (`encode_pairs`, which head_tokens does not apply to). One batch is all texts or all pairs.

    head_tokens: a long text keeps its first head_tokens and its last max_seq_len - 2 - head_tokens tokens; None:
    its first max_seq_len - 2. pad_to_multiple_of: see `padded_width`. whole: the texts' `encode_whole`, where the
    caller has it already."""
    items = list(items)
    pairs = [isinstance(item, tuple) for item in items]
    if not any(pairs):
        return encode_batch(
            tokenizer, items, max_seq_len, head_tokens=head_tokens, pad_to_multiple_of=pad_to_multiple_of, whole=whole
        )
    if not all(pairs) or any(len(item) != 2 for item in items):
        raise BadRequest(
            "a batch mixes texts and text pairs", "send (text, text_pair) tuples to a pair model, strings otherwise"
        )
    texts, second = zip(*items)
    return encode_pairs(tokenizer, texts, second, max_seq_len, pad_to_multiple_of=pad_to_multiple_of)


def encode_batch(
    tokenizer: Tokenizer,
    texts: Sequence[str],
    max_seq_len: int,
    *,
    head_tokens: int | None = None,
    pad_to_multiple_of: int = 1,
    whole: list | None = None,
) -> Encoded:
    """Texts cut to max_seq_len tokens, [CLS] and [SEP] included, into padded int64 arrays (see `Encoded`):
    the head (head_tokens None: the ids paddlenlp's ErnieTokenizer gives with truncation), or the first
    head_tokens and the last max_seq_len - 2 - head_tokens real tokens. whole: the texts' `encode_whole`.

    pad_to_multiple_of: pad to a length bucket instead of the longest text (see `padded_width`), so that
    batches of different texts get the same shape: Triton's dynamic batcher merges only requests whose
    shapes match, unless the model takes ragged inputs."""
    if max_seq_len < 2:
        raise BadOptionsError(
            f"max_seq_len must be at least 2 ([CLS] and [SEP]), got {max_seq_len}", "pass a max_seq_len of at least 2"
        )
    keep = max_seq_len - 2
    head = keep if head_tokens is None else head_tokens
    check_head_tokens(head, max_seq_len)
    cls, sep = tokenizer.token_to_id(CLS), tokenizer.token_to_id(SEP)
    rows, truncated = [], []
    for ids, offsets in whole if whole is not None else encode_whole(tokenizer, texts):
        rows.append(
            (
                [cls, *head_tail_ids(ids, keep, head), sep],
                [(0, 0), *head_tail_ids(offsets, keep, head), (0, 0)],
                [0] * (min(len(ids), keep) + 2),  # one segment per text
            )
        )
        truncated.append(len(ids) > keep)
    return _padded(tokenizer, rows, truncated, max_seq_len, pad_to_multiple_of)


def pair_lengths(first: int, second: int, budget: int) -> tuple[int, int]:
    """How many tokens of each text of a pair fit in `budget`, the way paddlenlp's ErnieTokenizer truncates
    (`longest_first`): one token at a time from the longer text, from the second on a tie. The Rust tokenizer's
    own longest_first breaks ties the other way (measured: 333 of 1,800 random title pairs got other ids)."""
    excess = first + second - budget
    if excess <= 0:
        return first, second
    if first > second:
        take = min(excess, first - second)
        first, excess = first - take, excess - take
    else:
        take = min(excess, second - first)
        second, excess = second - take, excess - take
    # Level now: the second gives the first token, then they alternate.
    return first - excess // 2, second - (excess + 1) // 2


def encode_pairs(
    tokenizer: Tokenizer,
    texts: Sequence[str],
    pairs: Sequence[str],
    max_seq_len: int,
    *,
    pad_to_multiple_of: int = 1,
) -> Encoded:
    """Tokenize text pairs as ERNIE does: `[CLS] text [SEP] pair [SEP]`, token_type_ids 0 up to the first [SEP]
    and 1 after it, cut to max_seq_len by `pair_lengths`; ids equal paddlenlp's ErnieTokenizer(text, pair).
    Offsets are into each token's own text (the pair's tokens into the pair); `truncated` says either text was cut.
    """
    if max_seq_len < 3:
        raise BadOptionsError(
            f"max_seq_len must be at least 3 for a pair ([CLS] and two [SEP]), got {max_seq_len}",
            "pass a max_seq_len of at least 3",
        )
    if len(texts) != len(pairs):
        raise BadRequest(f"{len(texts)} texts but {len(pairs)} pairs", "send one text_pair per text")
    encodings = tokenize_whole(tokenizer, [*texts, *pairs])
    cls, sep = tokenizer.token_to_id(CLS), tokenizer.token_to_id(SEP)
    rows, truncated = [], []
    for a, b in zip(encodings[: len(texts)], encodings[len(texts) :]):
        keep_a, keep_b = pair_lengths(len(a.ids), len(b.ids), max_seq_len - 3)
        ids = [cls, *a.ids[:keep_a], sep, *b.ids[:keep_b], sep]
        spans = [(0, 0), *a.offsets[:keep_a], (0, 0), *b.offsets[:keep_b], (0, 0)]
        rows.append((ids, spans, [0] * (keep_a + 2) + [1] * (keep_b + 1)))
        truncated.append(keep_a < len(a.ids) or keep_b < len(b.ids))
    return _padded(tokenizer, rows, truncated, max_seq_len, pad_to_multiple_of)


def encode_windows(
    tokenizer: Tokenizer, texts: Sequence[str], max_seq_len: int, stride: int, *, whole=None, cut: str = "sliding"
) -> Windowed:
    """Each text's whole token sequence as windows of at most max_seq_len tokens, [CLS] and [SEP] included (the
    window size: the model's max_seq_len, or less; see serving.windows): whole sentences packed (cut "sentences") or
    sliding windows. whole: the texts' `encode_whole`."""
    check_stride(stride, max_seq_len)
    whole = whole if whole is not None else encode_whole(tokenizer, texts)
    cls, sep = tokenizer.token_to_id(CLS), tokenizer.token_to_id(SEP)
    pad = tokenizer.token_to_id(PAD) or 0
    size = max_seq_len - 2
    ids, offsets = [ids for ids, _ in whole], [offs for _, offs in whole]
    return windows_from_tokens(ids, offsets, size, stride, cls, sep, pad, texts=texts if cut == "sentences" else None)


# ----------------------------------------------------------------------------------------------------
# Padding


def padded_width(longest: int, max_seq_len: int, pad_to_multiple_of: int = 1) -> int:
    """The width a batch whose longest row has `longest` tokens is padded to: the next multiple of
    pad_to_multiple_of, at most max_seq_len (a multiple of max_seq_len or more: always max_seq_len)."""
    if pad_to_multiple_of <= 1 or longest == 0:
        return longest
    return min(-(-longest // pad_to_multiple_of) * pad_to_multiple_of, max_seq_len)


def _padded(tokenizer: Tokenizer, rows: list, truncated: list[bool], max_seq_len: int, pad_to_multiple_of: int):
    """(ids, offsets, type ids) per row -> an Encoded batch padded with the vocabulary's pad id."""
    # Flatten once and scatter into the padded arrays: several times faster than filling row by row.
    batch = len(rows)
    lengths = np.fromiter((len(ids) for ids, _, _ in rows), dtype=np.int64, count=batch)
    width, total = (int(lengths.max()), int(lengths.sum())) if batch else (0, 0)
    width = padded_width(width, max_seq_len, pad_to_multiple_of)
    real = np.arange(width) < lengths[:, None]
    pad_id = tokenizer.token_to_id(PAD)
    input_ids = np.full((batch, width), pad_id if pad_id is not None else 0, dtype=np.int64)
    input_ids[real] = np.fromiter(chain.from_iterable(ids for ids, _, _ in rows), dtype=np.int64, count=total)
    offsets = np.zeros((batch, width, 2), dtype=np.int64)
    flat = chain.from_iterable(chain.from_iterable(spans for _, spans, _ in rows))
    offsets[real] = np.fromiter(flat, dtype=np.int64, count=2 * total).reshape(total, 2)
    token_type_ids = np.zeros((batch, width), dtype=np.int64)
    token_type_ids[real] = np.fromiter(chain.from_iterable(t for _, _, t in rows), dtype=np.int64, count=total)
    return Encoded(input_ids, token_type_ids, offsets, lengths, np.array(truncated, dtype=bool).reshape(batch))
