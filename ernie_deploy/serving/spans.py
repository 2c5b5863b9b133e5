"""UIE (Universal Information Extraction) on the serving side: schema, prompt rows, span decoding, answers.

A UIE model reads `[CLS] prompt [SEP] text [SEP]` and gives, per token, the probability that a span starts there and
the probability that one ends there. What it extracts is driven by a schema, read in stages: stage 1 prompts with
each top-level type; each later stage prompts with `<span text>的<relation>` for every span the stage before found
(PaddleNLP Taskflow's Chinese template). The answer per text has Taskflow's shape:
`{type: [{"text", "start", "end", "probability", "relations": {name: [...]}}]}`, character offsets into the text
as sent.

Differences from Taskflow, each deliberate:
- a span whose start or end token lies outside the text part ([CLS], [SEP], the prompt) is dropped: Taskflow maps
  [CLS] and [SEP] to character 0, which would report a span the model did not point at in the text;
- a long text is read in token windows (`prompt_rows`), not cut into character chunks, and a span two overlapping
  windows both find is answered once, with the higher probability;
- spans are sorted by (start, end), and a later stage prompts once per distinct span text of a text (two spans
  with the same text would get the same prompt, so the same answer); the answer is attached to each of them;
- prompts whose spans lie in the prompt itself (Taskflow's "type[option, option]" classification) are not read.

Only numpy, `tokenizers` and ernie_deploy.core / ernie_deploy.serving: this module runs inside Triton's python
backend. The model is reached through a `run(rows) -> (start_probs, end_probs)` callable, so onnxruntime serves it
and a Paddle model checks it in the tests.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from tokenizers import Tokenizer

from ernie_deploy.core.errors import BadOptionsError, BadRepositoryError, BadRequest
from ernie_deploy.serving.encoding import tokenize_whole
from ernie_deploy.serving.schema import (
    DEFAULT_MAX_SEQ_LEN,
    DEFAULT_POSITION_PROB,
    MAX_REQUEST_ROWS,
    MAX_SCHEMA_NAMES,
    SchemaNode,
    parse_schema,
)
from ernie_deploy.serving.tokenizer import CLS, PAD, SEP
from ernie_deploy.serving.windows import window_starts

__all__ = [
    "DEFAULT_MAX_SEQ_LEN",
    "DEFAULT_POSITION_PROB",
    "MAX_REQUEST_ROWS",
    "MAX_SCHEMA_NAMES",
    "Rows",
    "SchemaNode",
    "decode_rows",
    "extract",
    "pair_positions",
    "parse_schema",
    "prompt_rows",
    "row_spans",
]

# The prompt of a later stage: a span's text, then the relation's name (Taskflow's Chinese template).
RELATION_TEMPLATE = "{span}的{relation}"
# Full-width ASCII forms and the ideographic space as their half-width selves: Taskflow folds every prompt this way
# before tokenizing it, and the tokenizer keeps full-width forms, so an unfolded prompt would read other tokens.
_HALF_WIDTH = {0x3000: " ", **{cp: chr(cp - 0xFEE0) for cp in range(0xFF01, 0xFF5F)}}


# ----------------------------------------------------------------------------------------------------
# Prompt rows


@dataclass
class Rows:
    """Model rows `[CLS] prompt [SEP] text window [SEP]`, padded to the longest; R rows of L tokens.

    input_ids, token_type_ids, position_ids, attention_mask  int64 [R, L]  (type 0 up to the first [SEP], 1 after)
    offsets     int64 [R, L, 2]  per token of the text part, its [start, end) characters in its text; -1 elsewhere
    lengths     int64 [R]        real tokens per row
    pairs       list of (text index, prompt), one per distinct pair; pair_index int64 [R] names each row's
    texts       the texts as sent
    """

    input_ids: np.ndarray
    token_type_ids: np.ndarray
    position_ids: np.ndarray
    attention_mask: np.ndarray
    offsets: np.ndarray
    lengths: np.ndarray
    pair_index: np.ndarray
    pairs: list[tuple[int, str]]
    texts: list[str]

    def __len__(self) -> int:
        return len(self.lengths)


def half_width(prompt: str) -> str:
    """The prompt with full-width ASCII forms folded to half width (see _HALF_WIDTH)."""
    return prompt.translate(_HALF_WIDTH)


def _text_part(max_seq_len: int, prompt_tokens: int, stride: int | None) -> tuple[int, int]:
    """(W, step): tokens of the text a row holds beside a prompt of `prompt_tokens` (already cut), and the stride
    between its windows' starts (see prompt_rows)."""
    size = max_seq_len - 3 - prompt_tokens
    return size, max(1, min(size, size // 2 if stride is None else stride))


def _check_reading(max_seq_len: int, stride: int | None) -> None:
    if max_seq_len < 5:
        raise BadOptionsError(f"max_seq_len {max_seq_len} leaves no room for a prompt and a text", "pass 5 or more")
    if stride is not None and stride < 1:
        raise BadOptionsError(f"a window stride of {stride} tokens would never move", "pass a stride of 1 or more")


def row_count(text_tokens: int, prompt_tokens: int, max_seq_len: int, stride: int | None = None) -> int:
    """The rows one (text, prompt) pair takes: its windows (prompt_rows), from the two token counts."""
    size, step = _text_part(max_seq_len, min(prompt_tokens, (max_seq_len - 3) // 2), stride)
    return len(window_starts(text_tokens, size, step))


def prompt_rows(
    tokenizer: Tokenizer,
    texts: Sequence[str],
    prompts: Sequence[str] | Sequence[Sequence[str]],
    max_seq_len: int = DEFAULT_MAX_SEQ_LEN,
    stride: int | None = None,
    encodings: Sequence | None = None,
) -> Rows:
    """The rows for each text and each of its prompts: `prompts` a list of prompts for every text (n x k pairs,
    text-major), or one list per text. encodings: the texts already tokenized (serving.encoding.tokenize_whole).

    Window rule: a prompt keeps at most its first (max_seq_len - 3) // 2 tokens, so the text part always has at
    least half a row. The text part of a row holds W = max_seq_len - 3 - prompt tokens of the text; a text of at most
    W tokens is one row, a longer one is read in windows of W tokens starting every `stride` tokens (None: W // 2,
    at least 1; more than W: W), the last window ending on the text's last token, each window with the prompt again.
    """
    _check_reading(max_seq_len, stride)
    texts = list(texts)
    if prompts and all(isinstance(p, str) for p in prompts):
        prompts = [list(prompts)] * len(texts)
    if len(prompts) != len(texts):
        raise BadRequest(f"{len(texts)} texts but {len(prompts)} prompt lists", "send one list of prompts per text")
    pairs = [(i, p) for i, ps in enumerate(prompts) for p in ps]
    distinct = sorted({half_width(p) for _, p in pairs})
    text_tokens = list(encodings) if encodings is not None else tokenize_whole(tokenizer, texts)
    prompt_tokens = dict(zip(distinct, (e.ids for e in tokenize_whole(tokenizer, distinct))))
    cls, sep = tokenizer.token_to_id(CLS), tokenizer.token_to_id(SEP)
    pad = tokenizer.token_to_id(PAD) or 0
    keep_prompt = (max_seq_len - 3) // 2
    rows = []  # (ids, text offsets, prompt length, pair index)
    for index, (i, prompt) in enumerate(pairs):
        head = prompt_tokens[half_width(prompt)][:keep_prompt]
        ids, offsets = text_tokens[i].ids, text_tokens[i].offsets
        size, step = _text_part(max_seq_len, len(head), stride)
        for s in window_starts(len(ids), size, step):
            rows.append(([cls, *head, sep, *ids[s : s + size], sep], offsets[s : s + size], len(head), index))
    width = max((len(r[0]) for r in rows), default=0)
    count = len(rows)
    input_ids = np.full((count, width), pad, dtype=np.int64)
    token_type_ids = np.zeros((count, width), dtype=np.int64)
    offsets_arr = np.full((count, width, 2), -1, dtype=np.int64)
    lengths = np.zeros(count, dtype=np.int64)
    for r, (ids, offs, head_len, _) in enumerate(rows):
        input_ids[r, : len(ids)] = ids
        token_type_ids[r, head_len + 2 : len(ids)] = 1
        if offs:
            offsets_arr[r, head_len + 2 : head_len + 2 + len(offs)] = offs
        lengths[r] = len(ids)
    attention_mask = (np.arange(width)[None, :] < lengths[:, None]).astype(np.int64)
    return Rows(
        input_ids=input_ids,
        token_type_ids=token_type_ids,
        position_ids=np.broadcast_to(np.arange(width, dtype=np.int64), (count, width)).copy(),
        attention_mask=attention_mask,
        offsets=offsets_arr,
        lengths=lengths,
        pair_index=np.array([r[3] for r in rows], dtype=np.int64),
        pairs=pairs,
        texts=texts,
    )


# ----------------------------------------------------------------------------------------------------
# Span decoding


def pair_positions(starts: Sequence[int], ends: Sequence[int]) -> list[tuple[int, int]]:
    """Start and end positions paired as Taskflow pairs them: ends in order, each taking the latest start at or
    before it that no earlier end has passed; every start at or before an end is then used up, so an end with no
    start left after the previous end pairs with nothing."""
    starts, ends = sorted(starts), sorted(ends)
    pairs, next_start = [], 0
    for end in ends:
        taken = next_start
        while taken < len(starts) and starts[taken] <= end:
            taken += 1
        if taken > next_start:
            pairs.append((starts[taken - 1], end))
            next_start = taken
        if next_start == len(starts):
            break
    return pairs


def row_spans(start_probs: np.ndarray, end_probs: np.ndarray, offsets: np.ndarray, length: int, threshold: float):
    """(start char, end char, probability) of one row's spans: positions over the threshold among its `length`
    real tokens, paired (`pair_positions`), kept where both ends lie in the text part; probability start x end."""
    start_probs = np.asarray(start_probs, dtype=np.float64)[:length]
    end_probs = np.asarray(end_probs, dtype=np.float64)[:length]
    found = []
    for s, e in pair_positions(np.flatnonzero(start_probs > threshold), np.flatnonzero(end_probs > threshold)):
        if offsets[s, 0] < 0 or offsets[e, 0] < 0:
            continue
        found.append((int(offsets[s, 0]), int(offsets[e, 1]), float(start_probs[s]) * float(end_probs[e])))
    return found


def decode_rows(rows: Rows, start_probs, end_probs, position_prob: float = DEFAULT_POSITION_PROB) -> list[list[dict]]:
    """Each pair's spans (`rows.pairs` order) as Taskflow answers them: {"text", "start", "end", "probability"},
    sorted by (start, end); a span several windows of a pair find is kept once, with its highest probability.
    start_probs, end_probs: [R, L] or [R, L, 1] (the model's sigmoid outputs)."""
    start_probs, end_probs = np.asarray(start_probs), np.asarray(end_probs)
    if start_probs.ndim == 3:
        start_probs, end_probs = start_probs[..., 0], end_probs[..., 0]
    longest = int(rows.lengths.max(initial=0))
    if (
        start_probs.shape != end_probs.shape
        or start_probs.ndim != 2
        or start_probs.shape[0] != len(rows)
        or (start_probs.shape[1] < longest)
    ):
        # Not the request's fault: the model served does not read the rows this module builds.
        raise BadRepositoryError(
            f"the model gave start {list(start_probs.shape)} and end {list(end_probs.shape)} probabilities for "
            f"{len(rows)} rows of up to {longest} tokens",
            "serve a UIE model that returns one start and one end probability per token of each row it is given",
        )
    best: list[dict[tuple[int, int], float]] = [{} for _ in rows.pairs]
    for r in range(len(rows)):
        kept = best[rows.pair_index[r]]
        for start, end, prob in row_spans(
            start_probs[r], end_probs[r], rows.offsets[r], int(rows.lengths[r]), position_prob
        ):
            if prob > kept.get((start, end), -1.0):
                kept[(start, end)] = prob
    answers = []
    for (i, _), kept in zip(rows.pairs, best):
        text = rows.texts[i]
        answers.append(
            [{"text": text[s:e], "start": s, "end": e, "probability": p} for (s, e), p in sorted(kept.items())]
        )
    return answers


# ----------------------------------------------------------------------------------------------------
# Result assembly

RunFn = Callable[[Rows], tuple[np.ndarray, np.ndarray]]


def first_stage_rows(
    tokenizer: Tokenizer,
    encodings: Sequence,
    schemas: Sequence[tuple[SchemaNode, ...]],
    max_seq_len: int = DEFAULT_MAX_SEQ_LEN,
    stride: int | None = None,
) -> list[int]:
    """Each text's rows in the first stage (every top-level type of its schema, in windows): what the request limit
    (MAX_REQUEST_ROWS) counts, from the texts' tokens, before any model runs."""
    _check_reading(max_seq_len, stride)
    names = sorted({half_width(node.name) for nodes in schemas for node in nodes})
    lengths = dict(zip(names, (len(e.ids) for e in tokenize_whole(tokenizer, names))))
    return [
        sum(row_count(len(e.ids), lengths[half_width(node.name)], max_seq_len, stride) for node in nodes)
        for e, nodes in zip(encodings, schemas)
    ]


def extract(
    tokenizer: Tokenizer,
    texts: Sequence[str],
    schema,
    run: RunFn,
    *,
    max_seq_len: int = DEFAULT_MAX_SEQ_LEN,
    stride: int | None = None,
    position_prob: float = DEFAULT_POSITION_PROB,
    encodings: Sequence | None = None,
) -> list[dict]:
    """Taskflow's answer for each text (see the module docstring). Stages go one schema depth at a time, each one
    `run` call over all its rows (every text, every prompt of every node at that depth); a stage with no prompt
    (no span found above it) makes no call. schema: a form `parse_schema` reads or its parsed tree, for every text;
    or a list of parsed trees, one per text (texts of several requests, each with its own schema, in one batch).
    encodings: the texts already tokenized."""
    if not 0.0 <= position_prob < 1.0:
        raise BadOptionsError(f"position_prob {position_prob} is not in [0, 1)", "pass a probability such as 0.5")
    texts = list(texts)
    if isinstance(schema, list) and schema and all(isinstance(nodes, tuple) for nodes in schema):
        schemas = list(schema)
    else:
        schemas = [schema if isinstance(schema, tuple) else parse_schema(schema)] * len(texts)
    if len(schemas) != len(texts):
        raise BadRequest(f"{len(texts)} texts but {len(schemas)} schemas", "send one schema per text")
    answers: list[dict] = [{} for _ in texts]
    # Per text: each node to read at this depth, with the spans of its parent (None: a top-level type).
    stage: list[list[tuple[SchemaNode, list[dict] | None]]] = [[(node, None) for node in nodes] for nodes in schemas]
    while any(stage):
        prompts: list[list[str]] = [[] for _ in texts]
        # per text, per stage entry: prompt -> the parent spans it is attached to (None: a top-level type)
        asked: list[list[dict]] = []
        for i, entries in enumerate(stage):
            per_entry = []
            for node, parents in entries:
                if parents is None:
                    targets = {node.name: None}
                else:
                    targets = {}
                    for span in parents:
                        prompt = RELATION_TEMPLATE.format(span=span["text"], relation=node.name)
                        targets.setdefault(prompt, []).append(span)
                prompts[i].extend(p for p in targets if p not in prompts[i])
                per_entry.append(targets)
            asked.append(per_entry)
        if not any(prompts):
            break
        rows = prompt_rows(tokenizer, texts, prompts, max_seq_len, stride, encodings)
        start_probs, end_probs = run(rows)
        found = dict(zip(rows.pairs, decode_rows(rows, start_probs, end_probs, position_prob)))
        next_stage: list[list[tuple[SchemaNode, list[dict]]]] = [[] for _ in texts]
        for i, (entries, per_entry) in enumerate(zip(stage, asked)):
            for (node, _), targets in zip(entries, per_entry):
                made: list[dict] = []
                for prompt, spans_above in targets.items():
                    spans = found[(i, prompt)]
                    if not spans:
                        continue
                    if spans_above is None:
                        answers[i][node.name] = spans
                        made.extend(spans)
                        continue
                    for parent in spans_above:
                        # A copy each: a later stage attaches its own relations to each parent's spans.
                        own = copy.deepcopy(spans)
                        parent.setdefault("relations", {})[node.name] = own
                        made.extend(own)
                if made:
                    next_stage[i].extend((child, made) for child in node.children)
        stage = next_stage
    return answers
