"""Entities from token labels, token labels from character tags, and the entities' JSON form."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.serving.entities import (
    bio_spans,
    char_labels_to_token_labels,
    constrained_label_ids,
    decode_entities,
    entities_from_json,
    entities_to_char_bio,
    entities_to_json,
    spans_to_bio,
)

LABELS = ["O", "B-LOC", "B-ORG", "B-PER", "I-LOC", "I-ORG", "I-PER"]
ID = {name: i for i, name in enumerate(LABELS)}
SPECIAL = "[S]"  # stands for [CLS], [SEP] or padding in hand-made rows; its label must not matter


def _row(text: str, tokens: list[tuple[int, int, str]], width: int | None = None, junk: str = "B-PER"):
    """Arrays for `[CLS] tokens [SEP] pad...`: tokens are (start, end, predicted tag); specials and padding
    get offsets (0, 0) and the tag `junk`, which decoding must ignore."""
    length = len(tokens) + 2
    width = width or length
    ids = np.full(width, ID[junk], dtype=np.int64)
    offsets = np.zeros((width, 2), dtype=np.int64)
    for i, (start, end, tag) in enumerate(tokens, start=1):
        ids[i] = ID[tag]
        offsets[i] = (start, end)
    return text, ids, offsets, length


def _chars(text: str, tags: list[str]) -> list[tuple[int, int, str]]:
    """One token per character."""
    return [(i, i + 1, tag) for i, tag in enumerate(tags)]


def _ent(kind: str, start: int, end: int, text: str) -> dict:
    return {"type": kind, "start": start, "end": end, "text": text[start:end]}


# ---------------------------------------------------------------------------------------------------
# bio_spans


def test_bio_spans_basic():
    assert bio_spans([]) == []
    assert bio_spans(["O", "O"]) == []
    assert bio_spans(["B-PER", "I-PER", "O", "B-LOC"]) == [("PER", 0, 2), ("LOC", 3, 4)]
    assert bio_spans(["B-PER", "B-PER", "I-PER"]) == [("PER", 0, 1), ("PER", 1, 3)]


def test_bio_spans_lenient():
    assert bio_spans(["I-PER", "I-PER", "O"]) == [("PER", 0, 2)]  # I- without B- starts an entity
    assert bio_spans(["O", "I-LOC"]) == [("LOC", 1, 2)]
    assert bio_spans(["B-PER", "I-LOC", "I-LOC"]) == [("PER", 0, 1), ("LOC", 1, 3)]  # a type change ends one
    assert bio_spans(["B-ORG", "I-ORG", "I-PER", "B-PER"]) == [("ORG", 0, 2), ("PER", 2, 3), ("PER", 3, 4)]


@pytest.mark.parametrize("tag", ["E-PER", "S-LOC", "B-", "I", "PER", "", "o"])
def test_bio_spans_rejects_non_bio_tags(tag):
    with pytest.raises(ErnieDeployError, match="not a BIO tag"):
        bio_spans(["O", tag])


def test_bio_spans_matches_seqeval_default_mode():
    from seqeval.metrics.sequence_labeling import get_entities

    rng = random.Random(0)
    tags = LABELS + ["B-MISC-X", "I-MISC-X"]  # a type with a hyphen, too
    for _ in range(3000):
        seq = [rng.choice(tags) for _ in range(rng.randint(0, 14))]
        expected = [(kind, start, end + 1) for kind, start, end in get_entities(seq)]  # seqeval's end is inclusive
        assert bio_spans(seq) == expected, seq


def test_spans_to_bio_round_trip():
    rng = random.Random(1)
    for _ in range(500):
        seq = [rng.choice(LABELS) for _ in range(rng.randint(0, 12))]
        spans = bio_spans(seq)
        strict = spans_to_bio(spans, len(seq))
        assert bio_spans(strict) == spans
        assert all(t == "O" or t.startswith(("B-", "I-")) for t in strict)


@pytest.mark.parametrize("spans", [[("PER", 0, 4)], [("PER", 1, 1)], [("PER", -1, 1)], [("A", 0, 2), ("B", 1, 3)]])
def test_spans_to_bio_rejects_bad_spans(spans):
    with pytest.raises(ErnieDeployError):
        spans_to_bio(spans, 3)


# ---------------------------------------------------------------------------------------------------
# decode_entities on hand-made rows


def test_entity_at_the_end_of_the_text_with_padding():
    text = "他去北京"
    row = _row(text, _chars(text, ["O", "O", "B-LOC", "I-LOC"]), width=10, junk="I-LOC")
    assert decode_entities(*row, LABELS) == [_ent("LOC", 2, 4, text)]


def test_padding_and_specials_with_garbage_labels_are_ignored():
    text = "北京"
    # Every special and padding position claims an entity; none may show up.
    row = _row(text, _chars(text, ["O", "O"]), width=8, junk="B-ORG")
    assert decode_entities(*row, LABELS) == []
    # Out-of-range ids on padding are not looked at either.
    text, ids, offsets, length = row
    ids[length:] = 99
    ids[0] = -5
    assert decode_entities(text, ids, offsets, length, LABELS) == []


def test_out_of_range_label_on_a_real_token():
    text, ids, offsets, length = _row("北京", _chars("北京", ["O", "O"]))
    ids[1] = len(LABELS)
    with pytest.raises(ErnieDeployError, match="out of range"):
        decode_entities(text, ids, offsets, length, LABELS)


def test_truncated_text_entity_cut_at_the_last_real_token():
    # max_seq_len 5: [CLS] 我 爱 北 [SEP]; "北京" continues past the cut, only "北" is in the input.
    text = "我爱北京天安门"
    text, ids, offsets, length = _row(text, _chars(text, ["O", "O", "B-LOC"]), junk="I-LOC")
    assert length == len(ids) == 5
    entities = decode_entities(text, ids, offsets, length, LABELS)
    assert entities == [_ent("LOC", 2, 3, text)]
    assert all(e["end"] <= len(text) for e in entities)


def test_truncated_text_entity_running_into_sep():
    text = "张三丰"
    text, ids, offsets, length = _row(text, _chars(text, ["B-PER", "I-PER"]), junk="I-PER")
    assert decode_entities(text, ids, offsets, length, LABELS) == [_ent("PER", 0, 2, text)]


def test_i_without_b_and_type_change():
    # Strict IOB2: runs that open with I- are not entities; a B- after them still is.
    text = "王五李四上海"
    tags = ["I-PER", "I-PER", "B-PER", "I-LOC", "I-LOC", "I-LOC"]
    assert decode_entities(*_row(text, _chars(text, tags)), LABELS) == [_ent("PER", 2, 3, text)]


# ---------------------------------------------------------------------------------------------------
# constrained_label_ids: the best strict-IOB2 sequence


def _logits_for(rows: list[list[dict[str, float]]], width: int) -> tuple[np.ndarray, np.ndarray]:
    """Logits [B, width, C] where each real token's scores are given per tag (others -5); [CLS] first."""
    logits = np.full((len(rows), width, len(LABELS)), -5.0)
    for b, row in enumerate(rows):
        for i, scores in enumerate(row, start=1):
            for tag, value in scores.items():
                logits[b, i, ID[tag]] = value
    return logits, np.array([len(row) + 2 for row in rows])


def test_constrained_ids_repair_an_entity_that_opens_with_i():
    # argmax reads I-PER I-PER (no entity under strict IOB2); B-PER is a close second on the first token.
    logits, lengths = _logits_for([[{"I-PER": 2.0, "B-PER": 1.9}, {"I-PER": 3.0}, {"O": 1.0}]], width=6)
    ids = constrained_label_ids(logits, lengths, LABELS)
    assert [LABELS[i] for i in ids[0, 1:4]] == ["B-PER", "I-PER", "O"]
    text = "张三说"
    offsets = np.array([[0, 0], [0, 1], [1, 2], [2, 3], [0, 0], [0, 0]])
    assert decode_entities(text, ids[0], offsets, int(lengths[0]), LABELS) == [_ent("PER", 0, 2, text)]


def test_constrained_ids_keep_a_valid_argmax_and_leave_specials_and_padding_alone():
    logits, lengths = _logits_for([[{"B-LOC": 2.0}, {"I-LOC": 2.0}], [{"O": 1.0}]], width=5)
    logits[:, 0, ID["I-ORG"]] = 9.0  # [CLS]: not a real token, whatever it scores
    ids = constrained_label_ids(logits, lengths, LABELS)
    assert ids.tolist() == logits.argmax(-1).tolist()


def test_constrained_ids_equal_brute_force_over_every_valid_sequence():
    import itertools

    rng = np.random.default_rng(0)
    valid = [
        seq
        for n in range(1, 5)
        for seq in itertools.product(range(len(LABELS)), repeat=n)
        if not LABELS[seq[0]].startswith("I-")
        and all(not LABELS[b].startswith("I-") or LABELS[a][2:] == LABELS[b][2:] for a, b in zip(seq, seq[1:]))
    ]
    for _ in range(40):
        lengths = rng.integers(2, 7, size=4)  # 0 to 4 real tokens, so some rows finish early
        logits = rng.normal(size=(4, 6, len(LABELS))) * 2
        ids = constrained_label_ids(logits, lengths, LABELS)
        for b, n in enumerate(lengths - 2):
            if n <= 0:
                continue
            best = max(
                (s for s in valid if len(s) == n), key=lambda s: sum(logits[b, 1 + i, t] for i, t in enumerate(s))
            )
            assert tuple(ids[b, 1 : 1 + n]) == best


def test_mixed_latin_digits_and_chinese_tokens():
    text = "张三在2008年用iPhone拍照"
    tokens = [
        (0, 1, "B-PER"),
        (1, 2, "I-PER"),
        (2, 3, "O"),
        (3, 5, "B-ORG"),
        (5, 7, "I-ORG"),
        (7, 8, "O"),
        (8, 9, "O"),
        (9, 15, "B-ORG"),
        (15, 16, "O"),
        (16, 17, "O"),
    ]
    assert decode_entities(*_row(text, tokens, width=20), LABELS) == [
        _ent("PER", 0, 2, text),
        _ent("ORG", 3, 7, text),
        _ent("ORG", 9, 15, text),
    ]


def test_spaces_between_tokens():
    # Whitespace makes no token: offsets jump over it, and an entity of several words keeps the inner space.
    text = " Tom  Lee 在 纽约 "
    tokens = [(1, 4, "B-PER"), (6, 9, "I-PER"), (10, 11, "O"), (12, 13, "B-LOC"), (13, 14, "I-LOC")]
    entities = decode_entities(*_row(text, tokens), LABELS)
    assert entities == [_ent("PER", 1, 9, text), _ent("LOC", 12, 14, text)]
    assert [e["text"] for e in entities] == ["Tom  Lee", "纽约"]


def test_empty_text_and_empty_rows():
    assert decode_entities("", *_row("", [], width=6)[1:], LABELS) == []
    assert decode_entities("   ", *_row("   ", [], width=4)[1:], LABELS) == []  # all whitespace: no tokens
    assert decode_entities("a", np.zeros(0, np.int64), np.zeros((0, 2), np.int64), 0, LABELS) == []


def test_spans_without_characters_or_outside_the_text_are_skipped():
    text = "北京"
    tokens = [(0, 0, "B-PER"), (0, 1, "O"), (1, 2, "O"), (2, 5, "B-LOC")]  # a (0, 0) token, one past the text
    assert decode_entities(*_row(text, tokens), LABELS) == []


def test_length_beyond_the_arrays_does_not_read_past_them():
    text, ids, offsets, _ = _row("北京", _chars("北京", ["B-LOC", "I-LOC"]))
    assert decode_entities(text, ids, offsets, 100, LABELS) == [_ent("LOC", 0, 2, text)]


# ---------------------------------------------------------------------------------------------------
# char_labels_to_token_labels


def test_char_labels_to_token_labels_specials_padding_and_first_char():
    text = "张三在2008年"
    # Odd on purpose: the gold entity starts inside the token "20", so that token is "O"; "##08" would get
    # the I-LOC of its first character, and becomes B-LOC so the target stays valid IOB2 (decoding is strict).
    char_tags = ["B-PER", "I-PER", "O", "O", "B-LOC", "I-LOC", "I-LOC", "O"]
    _, _, offsets, length = _row(
        text, [(0, 1, "O"), (1, 2, "O"), (2, 3, "O"), (3, 5, "O"), (5, 7, "O"), (7, 8, "O")], width=10
    )
    target = char_labels_to_token_labels(char_tags, offsets, length, ID)
    assert target.dtype == np.int64 and target.shape == (10,)
    names = [LABELS[i] if i >= 0 else None for i in target.tolist()]
    assert names == [None, "B-PER", "I-PER", "O", "O", "B-LOC", "O", None, None, None]
    assert target[0] == target[length - 1] == -100
    assert (char_labels_to_token_labels(char_tags, offsets, length, ID, ignore_index=-1)[length - 1 :] == -1).all()


def test_char_labels_to_token_labels_pieces_of_one_character_stay_one_entity():
    # A character that becomes several tokens gives each the same span; only the first may begin an entity.
    offsets = np.array([[0, 0], [0, 1], [0, 1], [1, 2], [0, 0]])
    target = char_labels_to_token_labels(["B-PER", "I-PER"], offsets, 5, ID)
    assert [LABELS[i] if i >= 0 else None for i in target.tolist()] == [None, "B-PER", "I-PER", "I-PER", None]


def test_char_labels_to_token_labels_errors():
    offsets = np.array([[0, 0], [0, 1], [3, 4], [0, 0]])
    with pytest.raises(ErnieDeployError, match="outside a text"):
        char_labels_to_token_labels(["O", "O"], offsets, 4, ID)
    with pytest.raises(ErnieDeployError, match="not among the labels"):
        char_labels_to_token_labels(["B-MISC"], offsets[[0, 1, 3]], 3, ID)


def test_char_labels_to_token_labels_empty_text():
    target = char_labels_to_token_labels([], np.zeros((4, 2), np.int64), 2, ID)
    assert target.tolist() == [-100] * 4


# ---------------------------------------------------------------------------------------------------
# With the real tokenizer


@pytest.fixture
def tokenizer(tmp_path):
    from ernie_deploy.serving.tokenizer import build_tokenizer

    vocab = ["[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]", *"张三在年用拍照于北京", "20", "##08", "iphone"]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    return build_tokenizer(tmp_path / "vocab.txt")


def _predicted(char_tags, offsets, length):
    """Token labels as a model that learned the targets perfectly would predict them (junk on specials)."""
    target = char_labels_to_token_labels(char_tags, offsets, length, ID)
    return np.where(target < 0, ID["I-ORG"], target)


def test_tokenizer_offsets_targets_and_decoding(tokenizer):
    from ernie_deploy.serving.encoding import encode_batch

    text = "张三在2008年用iPhone 拍照于北京"
    gold = {"张三": "PER", "2008年": "ORG", "iPhone": "ORG", "北京": "LOC"}
    char_tags = ["O"] * len(text)
    for word, kind in gold.items():
        start = text.index(word)
        char_tags[start : start + len(word)] = [f"B-{kind}"] + [f"I-{kind}"] * (len(word) - 1)

    enc = encode_batch(tokenizer, [text, "北京"], 64)
    offsets, length = enc.offsets[0], int(enc.lengths[0])
    assert [text[s:e] for s, e in offsets[1 : length - 1].tolist()] == [
        "张",
        "三",
        "在",
        "20",
        "08",
        "年",
        "用",
        "iPhone",
        "拍",
        "照",
        "于",
        "北",
        "京",
    ]
    entities = decode_entities(text, _predicted(char_tags, offsets, length), offsets, length, LABELS)
    assert [(e["text"], e["type"]) for e in entities] == list(gold.items())
    assert entities_to_char_bio(entities, len(text)) == char_tags

    # The shorter row of the batch is padded: its padding must not leak into its entities.
    offsets, length = enc.offsets[1], int(enc.lengths[1])
    assert length < enc.offsets.shape[1]
    predicted = np.full(enc.offsets.shape[1], ID["B-PER"])
    predicted[1:3] = [ID["B-LOC"], ID["I-LOC"]]
    assert decode_entities("北京", predicted, offsets, length, LABELS) == [_ent("LOC", 0, 2, "北京")]


def test_tokenizer_truncation(tokenizer):
    from ernie_deploy.serving.encoding import encode_batch

    text = "张三在2008年用iPhone 拍照于北京"
    enc = encode_batch(tokenizer, [text], 6)  # [CLS] 张 三 在 20 [SEP]
    assert enc.truncated[0] and int(enc.lengths[0]) == 6
    predicted = np.array([ID["B-LOC"], ID["B-PER"], ID["I-PER"], ID["O"], ID["B-ORG"], ID["I-ORG"]])
    entities = decode_entities(text, predicted, enc.offsets[0], 6, LABELS)
    assert entities == [_ent("PER", 0, 2, text), _ent("ORG", 3, 5, text)]  # "2008" cut to "20"
    assert entities_to_char_bio(entities, len(text))[3:7] == ["B-ORG", "I-ORG", "O", "O"]


# ---------------------------------------------------------------------------------------------------
# entities_to_char_bio and JSON


def test_entities_to_char_bio():
    text = "张三去北京"
    entities = [_ent("PER", 0, 2, text), _ent("LOC", 3, 5, text)]
    assert entities_to_char_bio(entities, len(text)) == ["B-PER", "I-PER", "O", "B-LOC", "I-LOC"]
    assert entities_to_char_bio([], 3) == ["O"] * 3
    with pytest.raises(ErnieDeployError):
        entities_to_char_bio([_ent("LOC", 3, 6, "张三去北京市")], len(text))


def test_entities_json_round_trip():
    text = "张三在2008年用iPhone 拍照于北京"
    entities = [_ent("PER", 0, 2, text), _ent("ORG", 9, 15, text), _ent("LOC", 19, 21, text)]
    raw = entities_to_json(entities)
    assert isinstance(raw, bytes)
    assert "北京".encode() in raw and b"\\u" not in raw and b": " not in raw and b", " not in raw
    assert entities_from_json(raw) == entities
    assert entities_from_json(raw.decode("utf-8")) == entities
    assert entities_from_json(entities_to_json([])) == []


@pytest.mark.parametrize(
    "data,problem",
    [
        (b"\xff\xfe", "not UTF-8"),
        ("[{", "not valid JSON"),
        ("{}", "must be a JSON list"),
        ("[1]", "not an object"),
        ('[{"type": "PER", "start": 0, "end": 1}]', "has keys"),
        ('[{"type": "PER", "start": 0, "end": 1, "text": "张", "label": 1}]', "has keys"),
        ('[{"type": "PER", "start": 0, "end": 1, "text": "张", "score": 0}]', "not in"),
        ('[{"type": "PER", "start": 0, "end": 1, "text": "张", "score": "1"}]', "must be a number"),
        ('[{"type": "PER", "start": "0", "end": 1, "text": "张"}]', "must be integers"),
        ('[{"type": "PER", "start": 0.0, "end": 1, "text": "张"}]', "must be integers"),
        ('[{"type": "PER", "start": false, "end": true, "text": "张"}]', "must be integers"),
        ('[{"type": 3, "start": 0, "end": 1, "text": "张"}]', "must be strings"),
        ('[{"type": "PER", "start": 1, "end": 1, "text": ""}]', "does not match"),
        ('[{"type": "PER", "start": -1, "end": 1, "text": "张三"}]', "does not match"),
        ('[{"type": "PER", "start": 0, "end": 3, "text": "张三"}]', "does not match"),
    ],
)
def test_entities_from_json_rejects(data, problem):
    with pytest.raises(ErnieDeployError, match=problem):
        entities_from_json(data)


def test_entities_from_json_rejects_non_json_types():
    with pytest.raises(ErnieDeployError, match="bytes or str"):
        entities_from_json(None)  # type: ignore[arg-type]
    assert json.loads(entities_to_json([{"type": "PER", "start": 0, "end": 1, "text": "\u2028"}])) == [
        {"type": "PER", "start": 0, "end": 1, "text": "\u2028"}
    ]


def test_the_client_prints_one_entity_per_line_as_one_json_list():
    from ernie_deploy.kinds.token.evaluate import entity_lines

    entities = [
        {"type": "PER", "start": 0, "end": 3, "text": "江泽民"},
        {"type": "ORG", "start": 11, "end": 14, "text": 'a "quoted"\nname'},
    ]
    printed = entity_lines(entities)
    assert json.loads(printed) == entities
    assert printed.splitlines()[1] == '  {"type": "PER", "start": 0, "end": 3, "text": "江泽民"},'
    assert len(printed.splitlines()) == 4  # a newline inside a text stays escaped
    assert entity_lines([]) == "[]" and json.loads(entity_lines([])) == []


def test_chunked_viterbi_finds_the_one_pass_path_on_long_texts(monkeypatch):
    """A long text is decoded in chunks joined afterwards (time linear in its tokens); the path is the one a single
    pass finds, for rows of every length, chunk edges included."""
    import ernie_deploy.serving.entities as E

    rng = np.random.default_rng(1)
    lengths = np.array([2, 3, 9, 10, 11, 17, 250, 603])  # [CLS] and [SEP] included
    logits = rng.normal(size=(len(lengths), 605, len(LABELS))) * 2
    monkeypatch.setattr(E, "_CHUNK_STEPS", 10**9)
    whole = constrained_label_ids(logits, lengths, LABELS)
    for chunk in (1, 8, 64):
        monkeypatch.setattr(E, "_CHUNK_STEPS", chunk)
        assert constrained_label_ids(logits, lengths, LABELS).tolist() == whole.tolist()
