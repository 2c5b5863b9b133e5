"""Named entities <-> BIO tags, per token and per character, and their JSON wire form.

Standard library and numpy only: the Triton python backend imports this module to turn predicted token
labels into entities with character offsets.

An entity is a dict `{"type": str, "start": int, "end": int, "text": str}` where start/end are code-point
offsets into the original text, end exclusive, and text == original[start:end]; decoded with the tokens'
probabilities, it also holds `"score"` (serving.entity_scores: the mean probability of its tokens' chosen tags).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence

import numpy as np

from ernie_deploy.core.errors import BadDataError, BadOptionsError, BadRepositoryError
from ernie_deploy.serving.entity_scores import chosen_probabilities, entity_score, score_problem

ENTITY_KEYS = frozenset({"type", "start", "end", "text"})
SCORED_KEYS = ENTITY_KEYS | {"score"}
# What `entities_from_json` answers a text that is not the entities a token model writes: it came from another model.
_WIRE_FIX = "call a token classification model; `ernie-deploy check` shows the wire it answers in"

# How a token model's logits become entities, a setting of each model (`export --ner-decoding`, recorded in
# model.json; `build --ner-decoding` overrides it; the postprocess reads it from its config parameter
# DECODING_PARAMETER):
#   constrained  the most likely valid IOB2 sequence (Viterbi over the logits), read strictly: what this project's
#                models are scored with (bootstrap model, MSRA test split: entity F1 0.664, against 0.564 for
#                argmax and 0.640 for the argmax tags read strictly).
#   argmax       each token's most likely label, read as PaddleNLP reads it (ChunkEvaluator, i.e. seqeval's
#                get_entities in its default IOB2 mode): an I-X that does not continue an X entity opens one. A
#                checkpoint moved from PaddleNLP's own pipeline gets the entities that pipeline gets.
DECODINGS = ("constrained", "argmax")
DEFAULT_DECODING = "constrained"
DECODING_PARAMETER = "ner_decoding"


def _split_tag(tag: str) -> tuple[str, str]:
    """ "B-PER" -> ("B", "PER"); "O" -> ("O", ""). Anything else is not a BIO tag."""
    if tag == "O":
        return "O", ""
    prefix, sep, kind = tag.partition("-")
    if not sep or not kind or prefix not in ("B", "I"):
        raise BadDataError(
            f"{tag!r} is not a BIO tag (O, or B-/I- and a type)",
            "use BIO tags: O, or B-/I- and the entity type (e.g. B-PER)",
        )
    return prefix, kind


def bio_spans(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """Entities in a BIO sequence as (type, start, end_exclusive), leniently: an I-X that does not continue
    an X entity starts one, and a change of type ends one. This is what seqeval's default mode reads, so
    scores computed from these spans agree with seqeval's."""
    spans: list[tuple[str, int, int]] = []
    kind, start = None, 0  # the open entity, if any
    for i, tag in enumerate(tags):
        prefix, tag_kind = _split_tag(tag)
        if prefix == "I" and tag_kind == kind:
            continue
        if kind is not None:
            spans.append((kind, start, i))
        kind, start = (None, 0) if prefix == "O" else (tag_kind, i)
    if kind is not None:
        spans.append((kind, start, len(tags)))
    return spans


def spans_to_bio(spans: Iterable[tuple[str, int, int]], length: int) -> list[str]:
    """(type, start, end_exclusive) spans -> a BIO sequence of `length` tags (B on the first, I on the rest)."""
    tags = ["O"] * length
    fix = "give entities that lie inside the text and do not overlap"
    for kind, start, end in spans:
        if not 0 <= start < end <= length:
            raise BadDataError(f"span {kind} [{start}, {end}) does not fit in a sequence of {length}", fix)
        if any(t != "O" for t in tags[start:end]):
            raise BadDataError(f"span {kind} [{start}, {end}) overlaps another span", fix)
        tags[start:end] = [f"B-{kind}"] + [f"I-{kind}"] * (end - start - 1)
    return tags


def check_decoding(decoding: str) -> str:
    """`decoding` when it is one of DECODINGS, else a clear error."""
    if decoding not in DECODINGS:
        raise BadOptionsError(f"unknown NER decoding {decoding!r}", f"use one of {', '.join(DECODINGS)}")
    return decoding


def label_ids(
    logits: np.ndarray, lengths: np.ndarray, labels: Sequence[str], decoding: str = DEFAULT_DECODING
) -> np.ndarray:
    """Token label ids [B, L] of a batch's logits [B, L, C] under `decoding` (DECODINGS): each token's argmax, or
    the best valid IOB2 sequence of each text (constrained_label_ids). Decode them with `decode_entities` and the
    same `decoding`."""
    if check_decoding(decoding) == "argmax":
        return np.asarray(logits).argmax(axis=-1)
    return constrained_label_ids(logits, lengths, labels)


def decode_entities(
    text: str,
    label_ids: np.ndarray,
    offsets: np.ndarray,
    length: int,
    labels: Sequence[str],
    decoding: str = DEFAULT_DECODING,
    probabilities: np.ndarray | None = None,
) -> list[dict]:
    """Predicted token labels of one tokenized text -> entities with character offsets into `text`, each with its
    score when `probabilities` [L] (entity_scores.chosen_probabilities of the same label ids) are given.

    label_ids [L] and offsets [L, 2] cover `[CLS] tokens [SEP] padding`; `length` counts [CLS] and [SEP],
    so the real tokens are 1 .. length-2 (also when the text was truncated: [SEP] is then at
    length-1 == L-1). Labels on [CLS], [SEP] and padding are ignored, whatever they are.

    decoding "constrained" reads strict IOB2: a run that opens with I-X is not an entity (after
    constrained_label_ids no run does). "argmax" reads the tags as PaddleNLP's token-classification pipeline
    does: its ChunkEvaluator takes seqeval's `get_entities` (default IOB2 mode) over the argmax tags, where an
    I-X that does not continue an X entity opens one and a change of type ends one (`bio_spans`). PaddleNLP runs
    it over [CLS] and [SEP] too; they have no characters, so leaving them out gives the same character spans.
    """
    # constrained: strict IOB2, as the model was trained and as it is scored: a run that opens with I-X (no B-X) is
    # not an entity. Measured on the MSRA test set, reading such runs leniently as entities cost 7 points of F1.
    strict = check_decoding(decoding) == "constrained"
    label_ids = np.asarray(label_ids).reshape(-1)
    offsets = np.asarray(offsets).reshape(-1, 2)
    last = min(int(length), len(label_ids), len(offsets)) - 1  # index of [SEP]
    if last <= 1:
        return []
    real = label_ids[1:last]
    if real.min() < 0 or real.max() >= len(labels):
        bad = int(real[(real < 0) | (real >= len(labels))][0])
        raise BadRepositoryError(
            f"label id {bad} is out of range for {len(labels)} labels",
            "rebuild the repository so labels.json comes from the same model",
        )
    tags = [labels[i] for i in real.tolist()]
    entities = []
    for kind, first, stop in (span for span in bio_spans(tags) if not strict or tags[span[1]].startswith("B-")):
        # Token indices in `tags` are shifted by one: [CLS] was left out.
        start, end = int(offsets[first + 1][0]), int(offsets[stop][1])
        if not 0 <= start < end <= len(text):
            continue  # no characters (a special token's (0, 0)) or not in this text: nothing to report
        if entities and start < entities[-1]["end"]:
            continue  # tokens of one character split between two entities: keep the first, never overlap
        entity = {"type": kind, "start": start, "end": end, "text": text[start:end]}
        if probabilities is not None:
            entity["score"] = entity_score(np.asarray(probabilities).reshape(-1), first + 1, stop + 1)
        entities.append(entity)
    return entities


def batch_entities(
    texts: Sequence[str],
    logits: np.ndarray,
    lengths: np.ndarray,
    offsets: np.ndarray,
    labels: Sequence[str],
    decoding: str = DEFAULT_DECODING,
    *,
    scored: bool = False,
) -> list[list[dict]]:
    """Entities of each text of a batch from its logits [B, L, C], offsets [B, L, 2] and lengths [B] (as
    TokenClsPostprocess decodes them, in two steps: `label_ids`, then `decode_entities`), each with its score when
    `scored` (as the postprocess answers them; without, the spans alone, for comparing two runtimes' spans)."""
    ids = label_ids(logits, lengths, labels, decoding)
    probabilities = chosen_probabilities(logits, ids) if scored else [None] * len(texts)
    return [
        decode_entities(text, ids[i], offsets[i], int(lengths[i]), labels, decoding, probabilities[i])
        for i, text in enumerate(texts)
    ]


def iob2_transitions(labels: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Strict IOB2 as additive scores: 0 where allowed, -inf where not. Returns (transition [L, L] from the
    previous tag to the next, start [L] for a text's first token): I-X may only follow B-X or I-X."""
    parts = [_split_tag(tag) for tag in labels]
    transition = np.zeros((len(labels), len(labels)), dtype=np.float64)
    start = np.zeros(len(labels), dtype=np.float64)
    for j, (prefix, kind) in enumerate(parts):
        if prefix != "I":
            continue
        start[j] = -np.inf
        for i, (prev_prefix, prev_kind) in enumerate(parts):
            if prev_prefix == "O" or prev_kind != kind:
                transition[i, j] = -np.inf
    return transition, start


def constrained_label_ids(logits: np.ndarray, lengths: np.ndarray, labels: Sequence[str]) -> np.ndarray:
    """The most likely strict-IOB2 tag sequence of each text's real tokens (Viterbi over the logits), [B, L].

    A token model trained without a CRF often opens an entity with I-X, or switches type mid-entity; strict
    decoding then drops the entity. Choosing the best *valid* sequence instead recovers it: measured on the MSRA
    test split with the bootstrap model, entity F1 0.630 (argmax) -> 0.661. Where the argmax is already valid
    it is the best valid sequence, so only the other texts are decoded again.
    logits [B, L, C] cover `[CLS] tokens [SEP] padding`; `lengths` counts [CLS] and [SEP]. Positions outside the
    real tokens keep their argmax: decode_entities ignores them.
    """
    logits = np.asarray(logits)
    ids = logits.argmax(axis=-1)
    lengths = np.asarray(lengths).reshape(-1)
    real = np.clip(lengths.astype(np.int64) - 2, 0, max(0, logits.shape[1] - 2))  # real tokens per text
    steps = int(real.max()) if len(real) else 0
    if steps == 0:
        return ids
    transition, start = iob2_transitions(labels)
    tags = ids[:, 1 : 1 + steps]
    inside = np.arange(1, steps)[None, :] < real[:, None]  # pairs (t-1, t) of real tokens
    broken = np.isinf(start[tags[:, 0]]) | (np.isinf(transition[tags[:, :-1], tags[:, 1:]]) & inside).any(axis=1)
    rows = np.flatnonzero(broken & (real > 0))
    if len(rows):
        paths = _viterbi(logits[rows, 1 : 1 + steps].astype(np.float64), real[rows], transition, start)
        for row, path, n in zip(rows, paths, real[rows]):
            ids[row, 1 : 1 + n] = path[:n]
    return ids


# Steps of one Viterbi chunk. A text of up to this many tokens (any text of one window) is decoded in one pass; a longer
# one is cut into chunks of max(this, sqrt(tokens)) steps, every chunk decoded from every state it may be entered in at
# once, and the chunks then joined. numpy's overhead per step (~35 us) is then paid per chunk step, not per token:
# measured here on random logits (every position a candidate), 30,000 tokens took 1.03 s in one pass and 0.27 s in
# chunks, for the same path; 100,000 tokens 1.09 s in chunks.
_CHUNK_STEPS = 256


def _viterbi(emissions: np.ndarray, real: np.ndarray, transition: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Best path per row of emissions [B, T, C] under additive transition scores; row b uses its first real[b] >= 1
    steps. Raw logits serve as emissions: a per-token constant adds the same to every path."""
    count, steps, classes = emissions.shape
    size = min(steps, max(_CHUNK_STEPS, math.isqrt(steps) + 1))
    # Segments: each row's first chunk, entered from the text's start; each later chunk once per way the previous
    # chunk may end: states with the same transition row (B-X and I-X) enter a chunk alike, so a block of `kinds`
    # segments, one per distinct row.
    entries, kind = np.unique(transition, axis=0, return_inverse=True)
    kinds = len(entries)
    chunks = -(-np.asarray(real, dtype=np.int64) // size)
    rows, index, enter, first = [], [], [], []
    for row, n in enumerate(chunks.tolist()):
        first.append(len(rows))
        rows += [row] + [row] * kinds * (n - 1)
        index += [0] + [k for k in range(1, n) for _ in range(kinds)]
        enter += [-1] + list(range(kinds)) * (n - 1)
    rows, index, enter = np.array(rows), np.array(index), np.array(enter)
    position = index[:, None] * size + np.arange(size)[None, :]  # [segments, size]
    own = np.clip(np.asarray(real)[rows] - index * size, 0, size)  # real steps of each segment
    scores, back = _forward(
        emissions[rows[:, None], np.minimum(position, steps - 1)],
        own,
        np.where((enter < 0)[:, None], start[None], entries[np.maximum(enter, 0)]),
        transition,
    )
    # Join the chunks of each row: the best score of ending chunk k in each state, and which state chunk k-1 ended in.
    ends = np.zeros(len(rows), dtype=np.int64)
    chosen = []
    for row, n in enumerate(chunks.tolist()):
        best, came_from = scores[first[row]], []
        for k in range(1, n):
            block = scores[first[row] + 1 + (k - 1) * kinds + kind]  # [entered from state, ends in]
            candidates = best[:, None] + block
            came_from.append(candidates.argmax(axis=0))
            best = candidates.max(axis=0)
        state = int(best.argmax())
        for k in range(n - 1, 0, -1):
            previous = int(came_from[k - 1][state])
            segment = first[row] + 1 + (k - 1) * kinds + kind[previous]
            chosen.append(segment)
            ends[segment] = state
            state = previous
        chosen.append(first[row])
        ends[first[row]] = state
    chosen = np.array(chosen)
    tag = ends[chosen]
    path = np.zeros((len(chosen), size), dtype=np.int64)
    for t in range(size - 1, -1, -1):
        path[:, t] = tag
        tag = back[chosen, t, tag]
    out = np.zeros((count, steps), dtype=np.int64)
    keep = np.arange(size)[None, :] < own[chosen, None]
    out[np.broadcast_to(rows[chosen, None], keep.shape)[keep], position[chosen][keep]] = path[keep]
    return out


def _forward(emissions: np.ndarray, real: np.ndarray, entry: np.ndarray, transition: np.ndarray):
    """Viterbi's forward pass over rows of emissions [S, T, C], row s over its first real[s] steps, its first step
    scored with entry[s] [C]: (the best score of ending in each state [S, C], back pointers [S, T, C]). A finished
    row keeps its score and its pointers stand still, so a backtrack from its end state passes through unchanged."""
    count, steps, classes = emissions.shape
    stay = np.arange(classes)[None]
    score = emissions[:, 0] + entry
    back = np.zeros((count, steps, classes), dtype=np.int64)
    for t in range(1, steps):
        candidates = score[:, :, None] + transition[None]  # [S, previous, next]
        active = (t < real)[:, None]
        back[:, t] = np.where(active, candidates.argmax(axis=1), stay)
        score = np.where(active, candidates.max(axis=1) + emissions[:, t], score)
    return score, back


def char_labels_to_token_labels(
    char_tags: Sequence[str],
    offsets: np.ndarray,
    length: int,
    label_to_id: dict[str, int],
    ignore_index: int = -100,
) -> np.ndarray:
    """Per-character BIO tags of one text -> the training target of its tokens, int64 [L].

    A real token (1 .. length-2) takes the tag of its first character, offsets[i][0]; [CLS], [SEP] and
    padding get `ignore_index` so the loss skips them. When one character yields several tokens (they
    share a start offset), the later ones take I-X instead of B-X, so the character stays one entity.
    """
    offsets = np.asarray(offsets).reshape(-1, 2)
    target = np.full(len(offsets), ignore_index, dtype=np.int64)
    last = min(int(length), len(offsets)) - 1  # index of [SEP]
    prev_start, prev_tag = None, "O"
    for i in range(1, max(last, 1)):
        start = int(offsets[i][0])
        if not 0 <= start < len(char_tags):
            raise BadDataError(
                f"token {i} starts at character {start}, outside a text of {len(char_tags)} labelled characters",
                "fetch the data again (`ernie-deploy fetch-data`): each text needs one label per character",
            )
        tag = char_tags[start]
        if start == prev_start and tag.startswith("B-") and f"I-{tag[2:]}" in label_to_id:
            tag = f"I-{tag[2:]}"
        elif tag.startswith("I-") and prev_tag[2:] != tag[2:] and f"B-{tag[2:]}" in label_to_id:
            # The entity began inside the previous token (which took that token's first character's tag):
            # keep the target valid IOB2, since decoding drops runs that open with I-.
            tag = f"B-{tag[2:]}"
        if tag not in label_to_id:
            raise BadDataError(
                f"tag {tag!r} is not among the labels {sorted(label_to_id)}",
                "label the data with the model's labels only",
            )
        target[i] = label_to_id[tag]
        prev_start, prev_tag = start, tag
    return target


def entities_to_char_bio(entities: Iterable[dict], text_len: int) -> list[str]:
    """Entities of one text -> one BIO tag per character, to score against gold per-character labels."""
    return spans_to_bio(((e["type"], e["start"], e["end"]) for e in entities), text_len)


def entities_to_json(entities: Sequence[dict]) -> bytes:
    """Entities as compact UTF-8 JSON (Chinese kept as is, not \\u-escaped)."""
    return json.dumps(list(entities), ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def entities_from_json(data: bytes | str) -> list[dict]:
    """Parse and check what `entities_to_json` wrote: a list of entity dicts, offsets consistent with text."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        try:
            data = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadRepositoryError(f"entities are not UTF-8: {exc}", _WIRE_FIX) from None
    if not isinstance(data, str):
        raise BadRepositoryError(f"entities must be JSON bytes or str, got {type(data).__name__}", _WIRE_FIX)
    try:
        value = json.loads(data)
    except json.JSONDecodeError as exc:
        raise BadRepositoryError(f"entities are not valid JSON: {exc}", _WIRE_FIX) from None
    if not isinstance(value, list):
        raise BadRepositoryError(f"entities must be a JSON list, got {type(value).__name__}", _WIRE_FIX)
    for i, entity in enumerate(value):
        if not isinstance(entity, dict):
            raise BadRepositoryError(f"entity {i} is {type(entity).__name__}, not an object", _WIRE_FIX)
        if set(entity) not in (ENTITY_KEYS, SCORED_KEYS):
            raise BadRepositoryError(
                f"entity {i} has keys {sorted(entity)}, expected {sorted(ENTITY_KEYS)} and optionally 'score'",
                _WIRE_FIX,
            )
        if "score" in entity and (problem := score_problem(entity["score"])):
            raise BadRepositoryError(f"entity {i}: {problem}", _WIRE_FIX)
        start, end = entity["start"], entity["end"]
        # bool is an int subclass; true/false are not offsets.
        if any(not isinstance(v, int) or isinstance(v, bool) for v in (start, end)):
            raise BadRepositoryError(
                f"entity {i}: start and end must be integers, got {start!r} and {end!r}", _WIRE_FIX
            )
        if not isinstance(entity["type"], str) or not isinstance(entity["text"], str):
            raise BadRepositoryError(f"entity {i}: type and text must be strings", _WIRE_FIX)
        if not 0 <= start < end or len(entity["text"]) != end - start:
            raise BadRepositoryError(
                f"entity {i}: [{start}, {end}) does not match its text {entity['text']!r}", _WIRE_FIX
            )
    return value
