"""How extraction is trained (UIE): each text read once per entity type, as the row `[CLS] prompt [SEP] text [SEP]`
that serving.spans.prompt_rows builds for it, with a start target on the first token and an end target on the last
token of each entity of the prompt's type (a text with none is a row of zeros); binary cross entropy on the model's
start and end probabilities over real tokens; span F1 on dev, spans decoded as served (serving.spans)."""

from __future__ import annotations

from ernie_deploy.core.errors import BadDataError
from ernie_deploy.core.tasks import DEFAULT_MAX_SEQ_LEN
from ernie_deploy.kinds.uie import ENTITY_PROMPTS
from ernie_deploy.serving.entities import bio_spans
from ernie_deploy.serving.schema import DEFAULT_POSITION_PROB
from ernie_deploy.serving.spans import half_width, pair_positions, row_spans
from ernie_deploy.serving.tokenizer import CLS, SEP
from ernie_deploy.train.kind_recipe import IGNORE_INDEX, KindRecipe

# MSRA's entity tags as the prompts a model is trained (and served) with.
TYPE_PROMPTS = ENTITY_PROMPTS
# Saved into the checkpoint's config.json: the types it was trained to extract, the key export reads them from
# (fetch/uie.py TRAINED_SCHEMA; tests/test_uie_train.py holds them equal).
SCHEMA_KEY = "uie_schema"
# Loss against the probabilities the model returns (it applies the sigmoid itself): kept off 0 and 1 so a saturated
# probability cannot make the log infinite.
PROB_EPS = 1e-7


def _prompts(train_tags: list[list[str]]) -> list[str]:
    """The prompts of the entity types the train split holds, in TYPE_PROMPTS' order (then any other type's tag)."""
    kinds = {kind for tags in train_tags for kind, _, _ in bio_spans(tags)}
    known = [prompt for tag, prompt in TYPE_PROMPTS.items() if tag in kinds]
    return known + sorted(kinds - set(TYPE_PROMPTS))


def _max_seq_len(tokenizer) -> int:
    """The row length: the training tokenizer's cut (train.vocab.training_tokenizer), else the export default."""
    cut = tokenizer.truncation
    return int(cut["max_length"]) if cut else DEFAULT_MAX_SEQ_LEN


def _token_span(offsets: list[tuple[int, int]], start: int, end: int) -> tuple[int, int] | None:
    """(first, last) token of the characters [start, end) among a text's token offsets; None where no token lies
    inside them (the span was cut off, or is whitespace only)."""
    inside = [t for t, (s, e) in enumerate(offsets) if s < end and e > start]
    return (inside[0], inside[-1]) if inside else None


def _row(cls: int, sep: int, prompt_ids: list[int], text_ids: list[int], offsets, spans, max_seq_len: int):
    """One (text, prompt) row as prompt_rows builds its first window: the prompt cut to (max_seq_len - 3) // 2
    tokens, the text to what is left. Label: (tokens, text's first token, start tokens, end tokens); an entity the
    cut leaves incomplete is dropped (neither target), so that every start pairs with its own end."""
    head = prompt_ids[: (max_seq_len - 3) // 2]
    size = max_seq_len - 3 - len(head)
    first = len(head) + 2
    starts, ends = [], []
    cut = len(text_ids) > size
    text_ids, offsets = text_ids[:size], offsets[:size]
    for start, end in spans:
        tokens = _token_span(offsets, start, end)
        if tokens is None or (cut and offsets[-1][1] < end):
            continue
        starts.append(first + tokens[0])
        ends.append(first + tokens[1])
    ids = [cls, *head, sep, *text_ids, sep]
    return ids, (len(ids), first, sorted(starts), sorted(ends))


def _uie_encode(tokenizer, text: str, label: tuple[str, list[str]], label2id: dict[str, int]):
    """The row of one text under one prompt: label is (prompt, the text's per-character BIO tags)."""
    prompt, tags = label
    return _uie_expand(tokenizer, text, tags, label2id)[sorted(label2id, key=label2id.get).index(prompt)]


def _uie_expand(tokenizer, text: str, tags: list[str], label2id: dict[str, int]) -> list:
    """The rows of one text: one per prompt of `label2id` (the trained types), in id order."""
    if len(tags) != len(text):
        raise BadDataError(f"{len(tags)} tags for a text of {len(text)} characters", "re-run data preparation")
    by_prompt: dict[str, list[tuple[int, int]]] = {prompt: [] for prompt in label2id}
    for kind, start, end in bio_spans(tags):
        prompt = TYPE_PROMPTS.get(kind, kind)
        if prompt not in by_prompt:
            raise BadDataError(f"entity type {kind} is not among the train types", "re-run data preparation")
        by_prompt[prompt].append((start, end))
    cls, sep = tokenizer.token_to_id(CLS), tokenizer.token_to_id(SEP)
    max_seq_len = _max_seq_len(tokenizer)
    # Without [CLS]/[SEP], as serving.encoding.tokenize_whole reads them; the tokenizer's cut at max_seq_len leaves
    # more than a row's text part.
    enc = tokenizer.encode(text, add_special_tokens=False)
    rows = []
    for prompt in sorted(label2id, key=label2id.get):
        prompt_ids = tokenizer.encode(half_width(prompt), add_special_tokens=False).ids
        rows.append(_row(cls, sep, prompt_ids, enc.ids, enc.offsets, by_prompt[prompt], max_seq_len))
    return rows


def _uie_thin(rows: list, recipe: dict) -> list:
    """The positive rows and a seeded share (`negative_rows`, default all) of the negative ones, in order."""
    import numpy as np

    keep = recipe.get("negative_rows")
    if keep is None or keep >= 1:
        return rows
    draws = np.random.RandomState(recipe["seed"]).random_sample(len(rows))
    return [row for row, draw in zip(rows, draws) if row[1][2] or draw < keep]


def _uie_collate(labels: list, padded_len: int):
    """float32 [B, L, 3]: start target, end target (IGNORE_INDEX on padding in both), 1 on the text's tokens."""
    import numpy as np

    out = np.zeros((len(labels), padded_len, 3), dtype="float32")
    for r, (length, first, starts, ends) in enumerate(labels):
        out[r, length:, :2] = IGNORE_INDEX
        out[r, starts, 0] = 1.0
        out[r, ends, 1] = 1.0
        out[r, first : length - 1, 2] = 1.0
    return out


def _uie_loss(probs, labels):
    """Mean binary cross entropy of the start and end probabilities over the real tokens of the batch."""
    import paddle
    import paddle.nn.functional as F

    start_prob, end_prob = probs
    real = paddle.cast(labels[:, :, 0] != IGNORE_INDEX, "float32")
    total = 0.0
    for prob, target in ((start_prob, labels[:, :, 0]), (end_prob, labels[:, :, 1])):
        prob = paddle.clip(prob, PROB_EPS, 1.0 - PROB_EPS)
        total = total + (F.binary_cross_entropy(prob, target * real, reduction="none") * real).sum()
    return total / (2.0 * real.sum())


def _uie_span_f1(probs: list, labels: list, _names: list[str]) -> float:
    """Span F1 over every dev row (a text under one prompt): spans decoded as served (serving.spans.row_spans at
    the served threshold, positions of the text part only) against the gold ones, a span counted where its first
    and last token both match."""
    import numpy as np

    hit = predicted = gold = 0
    for batch_probs, batch_labels in zip(probs, labels):
        for row_probs, row_labels in zip(batch_probs, batch_labels):
            length = int((row_labels[:, 0] != IGNORE_INDEX).sum())
            text = row_labels[:, 2] == 1
            # token positions as "characters": a decoded span is then (first token, last token + 1)
            offsets = np.full((len(row_labels), 2), -1, dtype=np.int64)
            positions = np.flatnonzero(text)
            offsets[positions, 0], offsets[positions, 1] = positions, positions + 1
            found = {
                (s, e)
                for s, e, _ in row_spans(row_probs[:, 0], row_probs[:, 1], offsets, length, DEFAULT_POSITION_PROB)
            }
            truth = {
                (s, e + 1)
                for s, e in pair_positions(np.flatnonzero(row_labels[:, 0] == 1), np.flatnonzero(row_labels[:, 1] == 1))
            }
            hit += len(found & truth)
            predicted += len(found)
            gold += len(truth)
    precision = hit / predicted if predicted else 0.0
    recall = hit / gold if gold else 0.0
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


RECIPE = KindRecipe(
    label_list=_prompts,
    encode=_uie_encode,
    collate_labels=_uie_collate,
    loss=_uie_loss,
    metric=_uie_span_f1,
    metric_name="span f1 (token level, threshold 0.5)",
    expand=_uie_expand,
    thin=_uie_thin,
    config_extra=lambda labels: {SCHEMA_KEY: list(labels)},
)
