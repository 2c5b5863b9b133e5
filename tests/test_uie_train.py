"""The UIE bootstrap's rows, loss and dev metric (kinds/uie/train.py), and a tiny model trained on them and read back
through the served extraction (kinds/uie/evaluate.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ernie_deploy.core.tasks import get_task
from ernie_deploy.kinds.uie import evaluate as uie_eval
from ernie_deploy.kinds.uie import train as uie_train
from ernie_deploy.serving.entities import spans_to_bio
from ernie_deploy.serving.spans import prompt_rows
from ernie_deploy.serving.tokenizer import build_tokenizer
from ernie_deploy.train import batching
from ernie_deploy.train.kind_recipe import IGNORE_INDEX, text_rows
from ernie_deploy.train.recipes import KIND_RECIPES, TASK_RECIPES, recipe_for
from ernie_deploy.train.vocab import SPECIAL_TOKENS, training_tokenizer, write_vocab

RECIPE = uie_train.RECIPE
PROMPTS = ["人名", "地名", "机构名"]
LABEL2ID = {p: i for i, p in enumerate(PROMPTS)}
# (text, [(type, start, end)]) with a Latin word and digits, which are one token for several characters
TEXTS = [
    ("张伟上周在深圳参加了华为公司的会议", [("PER", 0, 2), ("LOC", 5, 7), ("ORG", 10, 14)]),
    ("李四说：明天去北京", [("PER", 0, 2), ("LOC", 7, 9)]),
    ("今天天气很好，2010年的hello会", []),
    ("王五", [("PER", 0, 2)]),
]


def _vocab(tmp_path):
    chars = sorted({c for text, _ in TEXTS for c in text if c.strip()} | {c for p in PROMPTS for c in p})
    vocab = [*SPECIAL_TOKENS, *chars, "hello", "2010", "##l", "##o"]
    write_vocab(vocab, tmp_path / "vocab.txt")
    return tmp_path / "vocab.txt"


def _tags(text, spans):
    return spans_to_bio(spans, len(text))


def _rows(tokenizer):
    return [row for text, spans in TEXTS for row in text_rows(RECIPE, tokenizer, text, _tags(text, spans), LABEL2ID)]


def test_the_prompts_are_the_ones_evaluation_scores_with_and_the_schema_key_the_one_export_reads():
    from ernie_deploy.fetch.uie import TRAINED_SCHEMA

    assert uie_train.SCHEMA_KEY == TRAINED_SCHEMA
    assert uie_train.TYPE_PROMPTS == uie_eval.ENTITY_PROMPTS
    assert RECIPE.label_list([_tags(t, s) for t, s in TEXTS]) == PROMPTS
    assert RECIPE.label_list([["B-LOC", "I-LOC"], ["B-PER"]]) == ["人名", "地名"]  # only the types train holds


def test_every_text_is_one_row_per_prompt_with_the_ids_and_types_serving_builds(tmp_path):
    vocab = _vocab(tmp_path)
    rows = _rows(training_tokenizer(vocab, 128))
    assert len(rows) == len(TEXTS) * len(PROMPTS)
    served = prompt_rows(build_tokenizer(vocab, lowercase=True), [t for t, _ in TEXTS], PROMPTS, 128)
    _, types, _ = batching.collate(rows, list(range(len(rows))), RECIPE, 0, 2)
    for r, (ids, label) in enumerate(rows):
        assert ids == served.input_ids[r, : served.lengths[r]].tolist()
        assert label[0] == len(ids) == served.lengths[r]
        assert types[r].tolist() == served.token_type_ids[r].tolist()
        # the text part starts where serving's offsets start
        assert label[1] == int(np.flatnonzero(served.offsets[r, :, 0] >= 0)[0])
    # and what paddlenlp's ErnieTokenizer gives for the (prompt, text) pair, as Taskflow encodes a UIE row
    from paddlenlp.transformers import ErnieTokenizer

    paddle_tok = ErnieTokenizer(str(vocab))
    for r, (ids, _) in enumerate(rows):
        text_index, prompt = served.pairs[served.pair_index[r]]
        want = paddle_tok(prompt, TEXTS[text_index][0])
        assert ids == want["input_ids"] and types[r, : len(ids)].tolist() == want["token_type_ids"]


def test_targets_sit_on_each_entitys_first_and_last_token_and_negatives_are_zero(tmp_path):
    vocab = _vocab(tmp_path)
    rows = _rows(training_tokenizer(vocab, 128))
    served = prompt_rows(build_tokenizer(vocab, lowercase=True), [t for t, _ in TEXTS], PROMPTS, 128)
    inverse = {p: t for t, p in uie_train.TYPE_PROMPTS.items()}
    y = RECIPE.collate_labels([label for _, label in rows], served.input_ids.shape[1])
    for r, (_, (length, first, starts, ends)) in enumerate(rows):
        text_index, prompt = served.pairs[served.pair_index[r]]
        text, spans = TEXTS[text_index]
        expected = sorted((s, e) for kind, s, e in spans if kind == inverse[prompt])
        decoded = [(int(served.offsets[r, s, 0]), int(served.offsets[r, e, 1])) for s, e in zip(starts, ends)]
        assert decoded == expected
        assert np.flatnonzero(y[r, :, 0] == 1).tolist() == starts
        assert np.flatnonzero(y[r, :, 1] == 1).tolist() == ends
        assert (y[r, length:, :2] == IGNORE_INDEX).all() and (y[r, :length, :2] >= 0).all()
        assert y[r, :, 2].tolist() == [float(first <= t < length - 1) for t in range(y.shape[1])]
        if not expected:
            assert not starts and not ends and not y[r, :length, :2].any()
    # the number "2010" is one token: a type's row on the third text is a negative row
    assert all(not label[2] for _, label in rows[6:9])


def test_an_entity_the_row_cuts_off_gets_no_targets(tmp_path):
    vocab = _vocab(tmp_path)
    text, spans = TEXTS[0]
    # 16 tokens: [CLS], 机构名 (3 tokens) and [SEP] leave the first 10 of the 17 characters before the last [SEP]
    ids, (_, _, starts, ends) = RECIPE.encode(
        training_tokenizer(vocab, 16), text, ("机构名", _tags(text, spans)), LABEL2ID
    )
    assert len(ids) == 16 and starts == ends == []
    _, (_, _, starts, ends) = RECIPE.encode(training_tokenizer(vocab, 16), text, ("地名", _tags(text, spans)), LABEL2ID)
    # [CLS] 地 名 [SEP]: the text starts at token 4, 深圳 (characters 5 and 6) on tokens 9 and 10
    assert (starts, ends) == ([4 + 5], [4 + 6])


def _probs(labels, wrong=()):
    """Start and end probabilities that say exactly the targets, except at `wrong` (row, token, channel)."""
    probs = np.where(labels[:, :, :2] == 1, 0.9, 0.1).astype("float32")
    for r, t, c in wrong:
        probs[r, t, c] = 0.9 if probs[r, t, c] < 0.5 else 0.1
    return probs


def test_the_metric_scores_spans_decoded_as_served(tmp_path):
    rows = _rows(training_tokenizer(_vocab(tmp_path), 128))
    width = max(len(ids) for ids, _ in rows)
    labels = RECIPE.collate_labels([label for _, label in rows], width)
    gold = sum(len(label[2]) for _, label in rows)
    assert gold == 6
    assert RECIPE.metric([_probs(labels)], [labels], PROMPTS) == 1.0
    # one end missed: that span is lost (its start pairs with nothing), recall 5/6
    r = next(i for i, (_, label) in enumerate(rows) if len(label[2]) == 1)
    missed = RECIPE.metric([_probs(labels, [(r, rows[r][1][3][0], 1)])], [labels], PROMPTS)
    assert missed == pytest.approx(2 * (5 / 6) / (1 + 5 / 6))
    # a start and an end inside the prompt are not a span in the text: nothing changes
    assert RECIPE.metric([_probs(labels, [(8, 1, 0), (8, 1, 1)])], [labels], PROMPTS) == 1.0
    # a spurious span in a negative row: precision 6/7
    spurious = RECIPE.metric([_probs(labels, [(7, 8, 0), (7, 9, 1)])], [labels], PROMPTS)
    assert spurious == pytest.approx(2 * (6 / 7) / (1 + 6 / 7))


def test_the_loss_is_binary_cross_entropy_over_real_tokens_only():
    import paddle

    labels = np.zeros((2, 5, 3), dtype="float32")
    labels[0, 1, 0] = labels[0, 2, 1] = 1.0
    labels[1, 3:, :2] = IGNORE_INDEX  # padding
    start = np.full((2, 5), 0.2, dtype="float32")
    end = np.full((2, 5), 0.2, dtype="float32")
    loss = float(RECIPE.loss((paddle.to_tensor(start), paddle.to_tensor(end)), paddle.to_tensor(labels)))
    # 16 real positions: 2 positives at -log(0.2), 14 negatives at -log(0.8)
    assert loss == pytest.approx((2 * -np.log(0.2) + 14 * -np.log(0.8)) / 16, rel=1e-5)
    start[1, 3:] = end[1, 3:] = 0.999  # padding is not scored
    again = float(RECIPE.loss((paddle.to_tensor(start), paddle.to_tensor(end)), paddle.to_tensor(labels)))
    assert again == pytest.approx(loss, rel=1e-6)
    start[0, 1] = end[0, 2] = 1.0  # a saturated right answer costs nothing and stays finite
    assert float(RECIPE.loss((paddle.to_tensor(start), paddle.to_tensor(end)), paddle.to_tensor(labels))) < loss


def test_the_uie_recipe_loads_the_taggers_encoder_and_leaves_other_tasks_as_they_were():
    assert KIND_RECIPES["uie"] is RECIPE and RECIPE.config_extra(PROMPTS) == {uie_train.SCHEMA_KEY: PROMPTS}
    recipe = recipe_for(get_task("uie"))
    assert recipe["init_from"] == "token_cls" and recipe["paddle_class"] == "UIE" and recipe["token_dropout"] == 0
    assert recipe["intermediate_size"] == recipe_for(get_task("token_cls"))["intermediate_size"]
    assert not recipe["budget_minutes"] and recipe["dataset"] == "msra_ner"  # its steps, whatever the host's speed
    assert all(
        KIND_RECIPES[k].expand is None and KIND_RECIPES[k].config_extra is None for k in KIND_RECIPES if k != "uie"
    )


def test_a_tiny_uie_learns_the_rows_and_extracts_as_served(tmp_path):
    """A few hundred steps on the rows above: the loss falls, the dev metric finds the spans, and the model read
    through serving.spans.extract (kinds/uie/evaluate.py) scores what the dev metric says."""
    import paddle
    from paddlenlp.transformers import UIE, ErnieConfig

    vocab = _vocab(tmp_path)
    rows = _rows(training_tokenizer(vocab, 128))
    paddle.seed(0)
    config = ErnieConfig(
        vocab_size=len(vocab.read_text(encoding="utf-8").split()),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        pad_token_id=0,
    )
    model = UIE(config)
    optimizer = paddle.optimizer.AdamW(learning_rate=3e-3, parameters=model.parameters())
    idx = list(range(len(rows)))
    losses = []
    for _ in range(400):
        ids, types, y = batching.collate(rows, idx, RECIPE, 0, 2)
        loss = RECIPE.loss(model(paddle.to_tensor(ids), token_type_ids=paddle.to_tensor(types)), paddle.to_tensor(y))
        loss.backward()
        optimizer.step()
        optimizer.clear_grad()
        losses.append(float(loss))
    assert losses[-1] < 0.05 * losses[0]
    metric, probs = batching.evaluate(model, rows, RECIPE, 0, 2, 64, PROMPTS)
    assert probs[0].shape[-1] == 2 and metric >= 0.8
    texts = [t for t, _ in TEXTS]
    answers = uie_eval.extract_answers(
        uie_eval.paddle_runner(model), build_tokenizer(vocab, lowercase=True), texts, PROMPTS, 128, chunk=3
    )
    report = uie_eval.score(texts, [_tags(t, s) for t, s in TEXTS], answers, PROMPTS)
    # the dev metric decodes rows as served: the same spans, so the same F1 as the served answers score
    assert report["spans"] == 6 and report["span_f1"] == pytest.approx(metric)
    assert all(
        span["text"] == texts[i][span["start"] : span["end"]]
        for i, a in enumerate(answers)
        for v in a.values()
        for span in v
    )
    json.dumps(answers, ensure_ascii=False)


def test_thinning_keeps_every_positive_row_and_a_seeded_share_of_the_negative_ones(tmp_path):
    rows = _rows(training_tokenizer(_vocab(tmp_path), 128)) * 50
    recipe = {"seed": 42, "negative_rows": 0.3}
    thinned = RECIPE.thin(rows, recipe)
    positives = [row for row in rows if row[1][2]]
    assert [row for row in thinned if row[1][2]] == positives
    negatives = len(thinned) - len(positives)
    assert 0.2 * (len(rows) - len(positives)) < negatives < 0.4 * (len(rows) - len(positives))
    assert RECIPE.thin(rows, recipe) == thinned  # seeded
    assert RECIPE.thin(rows, {"seed": 42}) == rows == RECIPE.thin(rows, {"seed": 42, "negative_rows": 1})
    # the key is the uie recipe's alone: every other task's recipe (its cache key) goes without it
    assert recipe_for(get_task("uie"))["negative_rows"] < 1
    assert all("negative_rows" not in recipe_for(get_task(t)) for t in TASK_RECIPES if t != "uie")
