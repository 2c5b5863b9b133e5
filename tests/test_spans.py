"""serving.spans (UIE extraction) against PaddleNLP's own reference: a UIE model at ERNIE 3.0 nano shape, random
weights, read by paddlenlp's tokenizer and Taskflow's span rules (get_bool_ids_greater_than, get_span,
get_id_and_prob), must give the spans the library gives from rows it builds with the project's tokenizer."""

from __future__ import annotations

import numpy as np
import pytest

from ernie_deploy.core.errors import BadOptionsError, BadRepositoryError, BadRequest
from ernie_deploy.serving import spans as sp
from ernie_deploy.serving.tokenizer import build_tokenizer

TEXTS = ["张三在北京的百度公司担任工程师。", "李四2019年加入阿里巴巴，总部在杭州。"]
ENTITY_SCHEMA = ["人物", "公司", "地点"]
RELATION_SCHEMA = {"人物": ["公司", "职位"]}
START_BIAS, END_BIAS = -4.0, -2.0  # logits added to the heads (see the uie fixture)


def biased_uie(folder, texts=TEXTS, names=(*ENTITY_SCHEMA, *RELATION_SCHEMA["人物"], "的")):
    """(model, paddlenlp tokenizer, our tokenizer): UIE over ERNIE 3.0 nano's configuration, random weights, its
    heads scaled and biased (START_BIAS, END_BIAS), saved as a PaddleNLP checkpoint in `folder`; its vocabulary holds
    the characters of `texts` and `names`. A random-init head gives every token about 0.5 (0.43 to 0.57 measured),
    where a difference in the last digits could flip a token over the threshold, and pairs nearly every token with
    itself; scaled by 10 and biased down, about 44% of start and 13% of end probabilities pass 0.5 (none within 0.01
    of it), which makes spans of one and of several characters in both stages."""
    import paddle
    from paddlenlp.transformers import UIE, ErnieConfig, ErnieTokenizer
    from paddlenlp.transformers.ernie.configuration import ERNIE_PRETRAINED_INIT_CONFIGURATION

    from ernie_deploy.fetch.shapes import filled_vocab

    config = dict(ERNIE_PRETRAINED_INIT_CONFIGURATION["ernie-3.0-nano-zh"])
    chars = sorted(set("".join(texts) + "".join(names)))
    latin = list("abcdefghijklmnopqrstuvwxyz0123456789")
    tokens = ["[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]", *chars, *latin, *(f"##{c}" for c in latin)]
    folder.mkdir(parents=True, exist_ok=True)
    vocab = folder / "vocab.txt"
    vocab.write_text("\n".join(filled_vocab(tokens, config["vocab_size"])) + "\n", encoding="utf-8")
    paddle.seed(7)
    model = UIE(ErnieConfig(**config))
    model.eval()
    for head, bias in ((model.linear_start, START_BIAS), (model.linear_end, END_BIAS)):
        head.weight.set_value(head.weight * 10.0)
        head.bias.set_value(paddle.full_like(head.bias, bias))
    model.save_pretrained(str(folder))
    paddle_tokenizer = ErnieTokenizer(str(vocab))
    paddle_tokenizer.save_pretrained(str(folder))
    return model, paddle_tokenizer, build_tokenizer(vocab)


@pytest.fixture(scope="module")
def uie(tmp_path_factory):
    return biased_uie(tmp_path_factory.mktemp("uie") / "checkpoint")


def paddle_run(model):
    """`run` for spans.extract: the Paddle model's forward on the rows as built."""
    import paddle

    def run(rows):
        with paddle.no_grad():
            start, end = model(
                input_ids=paddle.to_tensor(rows.input_ids),
                token_type_ids=paddle.to_tensor(rows.token_type_ids),
                position_ids=paddle.to_tensor(rows.position_ids),
                attention_mask=paddle.to_tensor(rows.attention_mask),
            )
        return start.numpy(), end.numpy()

    return run


def reference_spans(model, tokenizer, text: str, prompt: str, limit: float = 0.5) -> dict:
    """(start, end) -> probability, as Taskflow reads one short text: paddlenlp's tokenizer builds the row, the
    Paddle model scores it, Taskflow's helpers pair and map the positions. Spans with a start or an end outside the text
    part are left out (the library drops them; Taskflow maps [CLS]/[SEP] to character 0)."""
    import paddle
    from paddlenlp.taskflow.utils import dbc2sbc, get_id_and_prob
    from paddlenlp.utils.tools import get_bool_ids_greater_than, get_span

    enc = tokenizer(text=[dbc2sbc(prompt)], text_pair=[text], return_offsets_mapping=True, return_dict=False)[0]
    ids = enc["input_ids"]
    with paddle.no_grad():
        start, end = model(
            input_ids=paddle.to_tensor([ids]),
            token_type_ids=paddle.to_tensor([enc["token_type_ids"]]),
            position_ids=paddle.to_tensor([list(range(len(ids)))]),
        )
    starts = get_bool_ids_greater_than(start.numpy()[0].tolist(), limit=limit, return_prob=True)
    ends = get_bool_ids_greater_than(end.numpy()[0].tolist(), limit=limit, return_prob=True)
    first_text = ids.index(2, 1) + 1  # after the [SEP] that closes the prompt
    found = {
        s_e for s_e in get_span(starts, ends, with_prob=True) if first_text <= s_e[0][0] <= s_e[1][0] < len(ids) - 1
    }
    places, probs = get_id_and_prob(found, [list(o) for o in enc["offset_mapping"]])
    return dict(zip(places, probs))


def as_table(found: list[dict], text: str) -> dict:
    for span in found:
        assert span["text"] == text[span["start"] : span["end"]]
    return {(s["start"], s["end"]): s["probability"] for s in found}


def assert_same(ours: dict, reference: dict) -> None:
    assert ours.keys() == reference.keys()
    for key, prob in reference.items():
        assert ours[key] == pytest.approx(prob, abs=1e-4)


def compared_with_taskflow(model, paddle_tok, texts, answers, schema) -> int:
    """Assert each text's answer holds, for every type of `schema` (a list of types, or a dict of types to relation
    names) and every relation of each span found, the spans Taskflow's rules read from the Paddle model; returns how
    many spans were compared (a check of two empty answers compares none)."""
    types = schema if isinstance(schema, list) else list(schema)
    compared = 0
    for text, answer in zip(texts, answers):
        assert set(answer) <= set(types)
        for name in types:
            spans = answer.get(name, [])
            reference = reference_spans(model, paddle_tok, text, name)
            assert_same(as_table(spans, text), reference)
            compared += len(reference)
            for span in spans:
                for relation in schema.get(name, []) if isinstance(schema, dict) else []:
                    reference = reference_spans(model, paddle_tok, text, f"{span['text']}的{relation}")
                    assert_same(as_table(span.get("relations", {}).get(relation, []), text), reference)
                    compared += len(reference)
    return compared


def test_rows_match_paddlenlp_tokenizer(uie):
    _, paddle_tok, tok = uie
    rows = sp.prompt_rows(tok, TEXTS, ENTITY_SCHEMA)
    assert len(rows) == len(TEXTS) * len(ENTITY_SCHEMA)
    for r, (i, prompt) in enumerate(rows.pairs):
        enc = paddle_tok(text=prompt, text_pair=TEXTS[i], return_offsets_mapping=True)
        n = int(rows.lengths[r])
        assert rows.input_ids[r, :n].tolist() == enc["input_ids"]
        assert rows.token_type_ids[r, :n].tolist() == enc["token_type_ids"]
        text_part = slice(len(prompt) + 2, n - 1)  # one token per character here
        assert rows.offsets[r, text_part].tolist() == [list(o) for o in enc["offset_mapping"][text_part]]


def test_entity_schema_matches_taskflow_rules(uie):
    model, paddle_tok, tok = uie
    answers = sp.extract(tok, TEXTS, ENTITY_SCHEMA, paddle_run(model), max_seq_len=128)
    assert compared_with_taskflow(model, paddle_tok, TEXTS, answers, ENTITY_SCHEMA) >= 8  # 9 spans here


def test_relation_schema_matches_taskflow_rules(uie):
    model, paddle_tok, tok = uie
    answers = sp.extract(tok, TEXTS, RELATION_SCHEMA, paddle_run(model), max_seq_len=128)
    assert compared_with_taskflow(model, paddle_tok, TEXTS, answers, RELATION_SCHEMA) >= 16  # 19 spans here


def test_long_text_windows_match_taskflow_rules_per_window(uie):
    """A text longer than a row, read in windows: each window is the row paddlenlp builds for that stretch of the
    text (one token per character here), so the answer is the reference's spans of each stretch, shifted to the
    whole text, a span found twice kept with its higher probability."""
    model, paddle_tok, tok = uie
    # Without "2019": a window cut inside it reads "##1" where paddlenlp, tokenizing the cut stretch, reads "1".
    text = TEXTS[0] + TEXTS[1].replace("2019年", "")
    rows = sp.prompt_rows(tok, [text], ["人物"], max_seq_len=20)  # 15 text tokens a window, stride 7
    assert len(rows) == 4  # 31 tokens: windows at 0, 7, 14 and 16
    expected: dict = {}
    for r in range(len(rows)):
        text_part = rows.offsets[r][rows.offsets[r, :, 0] >= 0]
        a, b = int(text_part[0, 0]), int(text_part[-1, 1])
        for (s, e), prob in reference_spans(model, paddle_tok, text[a:b], "人物").items():
            expected[(s + a, e + a)] = max(prob, expected.get((s + a, e + a), 0.0))
    (answer,) = sp.extract(tok, [text], ["人物"], paddle_run(model), max_seq_len=20)
    assert_same(as_table(answer.get("人物", []), text), expected)
    assert len(expected) >= 3


# ----------------------------------------------------------------------------------------------------
# Schema


def test_schema_forms():
    assert sp.parse_schema("人物") == (sp.SchemaNode("人物"),)
    tree = sp.parse_schema(["时间", {"人物": "公司"}, {"公司": ["总部", {"创始人": ["出生地"]}]}])
    assert [n.name for n in tree] == ["时间", "人物", "公司"]
    assert tree[1].children == (sp.SchemaNode("公司"),)
    assert tree[2].children[1] == sp.SchemaNode("创始人", (sp.SchemaNode("出生地"),))


@pytest.mark.parametrize(
    "schema, says",
    [
        (3, "not a name"),
        ([], "names no type"),
        (["人物", 5], "not a name or a dict"),
        ({"人物": 5}, "not a list"),
        (["人物", " "], "empty"),
        ({"": ["公司"]}, "empty"),
        (["人物", "人物"], "named twice"),
        ([f"类型{i}" for i in range(sp.MAX_SCHEMA_NAMES + 1)], "more than"),
        ({"人物": [f"关系{i}" for i in range(sp.MAX_SCHEMA_NAMES)]}, "more than"),
    ],
)
def test_schema_refused(schema, says):
    with pytest.raises(BadRequest, match=says) as caught:
        sp.parse_schema(schema)
    assert caught.value.fix


# ----------------------------------------------------------------------------------------------------
# Windows, pairing, stages (a stub model)


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    folder = tmp_path_factory.mktemp("vocab")
    chars = sorted(set("".join(TEXTS) + "人物公司职位地点的"))
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]", *chars]) + "\n")
    return build_tokenizer(folder / "vocab.txt")


def test_pairing_follows_taskflow():
    from paddlenlp.utils.tools import get_span

    rng = np.random.default_rng(0)
    for _ in range(300):
        starts = sorted(rng.choice(20, rng.integers(0, 8), replace=False).tolist())
        ends = sorted(rng.choice(20, rng.integers(0, 8), replace=False).tolist())
        assert sorted(sp.pair_positions(starts, ends)) == sorted(get_span(starts, ends))


def test_windows_and_a_span_in_two_windows_kept_once(tok):
    text = TEXTS[0]  # 16 characters, one token each
    rows = sp.prompt_rows(tok, [text], ["人物"], max_seq_len=14, stride=3)
    # 14 - 3 - 2 prompt tokens = 9 text tokens a window; starts 0, 3, 6, then 7 ends on the last token
    assert len(rows) == 4 and rows.pairs == [(0, "人物")]
    assert [int(rows.offsets[r, 4, 0]) for r in range(4)] == [0, 3, 6, 7]
    start = np.zeros(rows.input_ids.shape)
    end = np.zeros(rows.input_ids.shape)
    # characters 6..7 ("百度") sit in windows 1 and 2; scored 0.8 x 0.8 in window 1 and 0.9 x 0.9 in window 2
    for r, p in ((1, 0.8), (2, 0.9)):
        s = int(np.flatnonzero(rows.offsets[r, :, 0] == 6)[0])
        start[r, s], end[r, s + 1] = p, p
    (found,) = sp.decode_rows(rows, start, end)
    assert found == [{"text": "百度", "start": 6, "end": 8, "probability": pytest.approx(0.81)}]


def test_prompts_folded_to_half_width_and_bad_outputs_refused(tok):
    assert sp.half_width("ＵＩＥ\u3000人物１") == "UIE 人物1"
    rows = sp.prompt_rows(tok, TEXTS, ["人物"])
    with pytest.raises(BadRepositoryError, match="2 rows"):
        sp.decode_rows(rows, np.zeros((2, 3)), np.zeros((2, 3)))
    with pytest.raises(BadOptionsError, match="never move"):
        sp.prompt_rows(tok, TEXTS, ["人物"], stride=0)


def test_spans_outside_the_text_are_dropped(tok):
    rows = sp.prompt_rows(tok, [TEXTS[0]], ["人物"])
    start, end = np.zeros(rows.input_ids.shape), np.zeros(rows.input_ids.shape)
    start[0, 0] = end[0, 5] = 0.9  # [CLS] .. a text token
    assert sp.decode_rows(rows, start, end) == [[]]


def test_stage_rows(tok):
    """Stage 1: one call, n texts x k types; stage 2: one call, a row per distinct span text and relation of the
    texts that found a span; no call where no span was found."""
    calls = []

    def run(rows):
        calls.append(sorted(rows.pairs))
        start, end = np.zeros(rows.input_ids.shape), np.zeros(rows.input_ids.shape)
        for r, (i, prompt) in enumerate(rows.pairs):
            if i == 0 and prompt == "人物":  # "张三" in text 0 only
                start[r, 4], end[r, 5] = 0.9, 0.8
        return start, end

    schema = {"人物": ["公司", "职位"], "地点": ["的"]}
    answers = sp.extract(tok, TEXTS, [schema, "公司"], run)
    assert calls == [
        sorted((i, p) for i in range(2) for p in ("人物", "地点", "公司")),
        [(0, "张三的公司"), (0, "张三的职位")],
    ]
    assert answers == [{"人物": [{"text": "张三", "start": 0, "end": 2, "probability": pytest.approx(0.72)}]}, {}]
    calls.clear()
    assert sp.extract(tok, TEXTS, ["地点"], run) == [{}, {}] and len(calls) == 1
