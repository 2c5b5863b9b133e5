"""The Triton-side tokenizer must give exactly the ids paddlenlp's ErnieTokenizer gives (the model was
trained on those), and offsets that index the original text."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.fetch.data import read_tsv
from ernie_deploy.fetch.datasets import prepare
from ernie_deploy.serving.encoding import encode_batch, encode_pairs, pair_lengths
from ernie_deploy.serving.tokenizer import (
    CLS,
    PAD,
    SEP,
    SPECIALS,
    UNK,
    build_tokenizer,
    load_tokenizer,
    save_tokenizer,
)

MAX_SEQ_LEN = 128

HARD = [
    # symbols: ErnieTokenizer makes each one a token of its own
    "今天气温25℃，售价¥100×2件",
    "©2024 ACME™ 角度35°±2 面积5m²",
    "a+b=c <tag> $5 ^_^ `x` 50% ~home | 3/4 ⅓",
    # emoji: plain, skin tones, ZWJ sequences, flags, keycaps, variation selectors
    "好开心😀😂👍",
    "👋🏿👋🏻 hi👍🏽there",
    "一家人👨‍👩‍👧‍👦出游 👩🏽‍💻coder",
    "🇨🇳🇺🇸 1️⃣ ❤️ ✌︎ 🫠",
    # full-width Latin, digits and punctuation (not folded: ErnieTokenizer keeps them)
    "ＡＢＣｄｅｆ１２３４５！？（）％＠",
    # accented Latin: precomposed, combining, and characters whose lowercase is longer
    "café naïve résumé Ångström façade",
    "cafe\u0301 nai\u0308ve",
    "İstanbul ΟΔΟΣ Straße ǅemal",
    # mixed Chinese, English and digits
    "iPhone15 Pro售价7999元",
    "GPT-4o发布，OpenAI CEO Sam Altman说：2024年Q3营收同比+12.5%",
    # whitespace of every kind
    "a  b\t\tc\n\nd\r\ne\u3000f\u00a0g\u2028h\u2009i",
    "   \n\t  ",
    # control, format, private-use, replacement and unassigned characters; a lone surrogate
    "a\x00b\x01c\x7fd\u200be\u200df\ufeffg\ufffdh",
    "\x00\x01\x02",
    "x\ue000y\U000e0080z",
    "a\ud800b",
    # CJK punctuation, kana, hangul, other scripts with combining marks
    "《三体》——“你好”、『引号』【括号】…。！？",
    "東京タワー ひらがな 서울특별시",
    "مرحبا שלום สวัสดี नमस्ते",
    # special tokens typed in the text: ordinary text, or (match_special_tokens) kept whole, case-sensitive
    "[CLS] 你好 [SEP] [MASK]x[UNK] ab[PAD]cd [sep]",
    # long: truncation, and words around max_input_chars_per_word (100)
    "中" * 300,
    "The quick brown fox jumps over the lazy dog. " * 20,
    "a" * 100 + " " + "b" * 101,
    # empty
    "",
]

# Multi-character pieces, so that WordPiece's greedy longest match is really exercised.
WORDPIECES = ["iphone", "##15", "pro", "##hone", "ph", "open", "##ai", "alt", "##man", "the", "##uick", "qu", "cafe"]


# ----------------------------------------------------------------------------------------------------
# Helpers and fixtures


def char_vocab(texts, extra=(), *, lowercase=True) -> list[str]:
    """Specials, then every character of `texts` as the tokenizer sees it (bare, and "##"-prefixed when it
    continues a word), then `extra`: a vocabulary with no [UNK] on `texts`. Uses the tokenizer's own
    normalizer and pre-tokenizer, so it is exactly what the tokenizer looks up."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        probe = build_tokenizer(write_vocab(SPECIALS, Path(tmp) / "vocab.txt"), lowercase=lowercase)
    seen = dict.fromkeys(SPECIALS)
    for text in texts:
        text = text.replace("\ud800", "")  # the one lone surrogate in HARD, which cannot reach Rust
        for word, _ in probe.pre_tokenizer.pre_tokenize_str(probe.normalizer.normalize_str(text)):
            seen.setdefault(word[0])
            for ch in word[1:]:
                seen.setdefault("##" + ch)
    for token in extra:
        seen.setdefault(token)
    return list(seen)


def write_vocab(tokens, path: Path) -> Path:
    path.write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def thucnews() -> dict[str, list[str]]:
    root = prepare("thucnews")
    return {split: read_tsv(root / f"{split}.tsv")[0] for split in ("train", "test")}


@pytest.fixture(scope="module")
def vocabs(thucnews, tmp_path_factory) -> dict[str, Path]:
    """train: characters of the train split only (test text and HARD strings hit [UNK]);
    full: those plus every HARD character plus multi-character pieces."""
    root = tmp_path_factory.mktemp("vocab")
    return {
        "train": write_vocab(char_vocab(thucnews["train"]), root / "train_vocab.txt"),
        "full": write_vocab(char_vocab(thucnews["train"] + HARD, WORDPIECES), root / "full_vocab.txt"),
    }


@pytest.fixture(scope="module")
def full_tok(vocabs):
    return build_tokenizer(vocabs["full"])


def paddle_tokenizer(vocab: Path, **kwargs):
    transformers = pytest.importorskip(
        "paddlenlp.transformers",
        reason="paddlenlp is not importable; it is the reference ErnieTokenizer (pip install -e .[export])",
    )
    return transformers.ErnieTokenizer(str(vocab), **kwargs)


def assert_same_as_paddle(tok, ref, texts: list[str], max_seq_len: int) -> None:
    enc = encode_batch(tok, texts, max_seq_len)
    mismatches = []
    for i, text in enumerate(texts):
        want = ref(text, max_length=max_seq_len, truncation=True)
        n = enc.lengths[i]
        got_ids = enc.input_ids[i, :n].tolist()
        if got_ids != want["input_ids"] or enc.token_type_ids[i, :n].tolist() != want["token_type_ids"]:
            got = [tok.id_to_token(t) for t in got_ids]
            mismatches.append((text, ref.convert_ids_to_tokens(want["input_ids"]), got))
            continue
        full_len = len(ref(text)["input_ids"])
        assert enc.truncated[i] == (full_len > max_seq_len), text
    assert not mismatches, "\n".join(f"{t!r}\n  paddle: {w}\n  ours:   {g}" for t, w, g in mismatches[:10])
    pad = tok.token_to_id(PAD)
    assert (enc.input_ids[enc.attention_mask == 0] == pad).all()


def real_tokens(tok, text: str, max_seq_len: int = MAX_SEQ_LEN) -> list[tuple[str, str]]:
    """(token, text[start:end]) for every token but [CLS]/[SEP]."""
    enc = encode_batch(tok, [text], max_seq_len)
    n = enc.lengths[0]
    ids, offsets = enc.input_ids[0, 1 : n - 1], enc.offsets[0, 1 : n - 1]
    return [(tok.id_to_token(int(i)), text[a:b]) for i, (a, b) in zip(ids, offsets)]


# ----------------------------------------------------------------------------------------------------
# Parity with paddlenlp's ErnieTokenizer


@pytest.mark.parametrize("max_seq_len", [MAX_SEQ_LEN, 16])
def test_thucnews_test_split_matches_paddlenlp(thucnews, vocabs, max_seq_len):
    texts = thucnews["test"]
    assert len(texts) == 1000
    for name in ("train", "full"):
        assert_same_as_paddle(build_tokenizer(vocabs[name]), paddle_tokenizer(vocabs[name]), texts, max_seq_len)


@pytest.mark.parametrize("vocab", ["train", "full"])
@pytest.mark.parametrize("max_seq_len", [MAX_SEQ_LEN, 8])
def test_hard_strings_match_paddlenlp(vocabs, vocab, max_seq_len):
    assert_same_as_paddle(build_tokenizer(vocabs[vocab]), paddle_tokenizer(vocabs[vocab]), HARD, max_seq_len)


def test_matched_special_tokens_match_paddlenlp_from_pretrained(vocabs, tmp_path):
    """ErnieTokenizer.from_pretrained(dir) keeps "[SEP]" typed in the text whole; so does
    match_special_tokens=True (the default, like ErnieTokenizer(vocab_file), reads it as text)."""
    base = paddle_tokenizer(vocabs["full"])
    base.save_pretrained(str(tmp_path))
    ref = type(base).from_pretrained(str(tmp_path))
    tok = build_tokenizer(vocabs["full"], match_special_tokens=True)
    assert_same_as_paddle(tok, ref, HARD, MAX_SEQ_LEN)
    assert [t for t, _ in real_tokens(tok, "a[SEP]b [sep]")] == ["a", "[SEP]", "b", "[", "s", "##e", "##p", "]"]


def test_cased_hard_strings_match_paddlenlp(thucnews, tmp_path):
    vocab = write_vocab(char_vocab(thucnews["train"][:2000] + HARD, lowercase=False), tmp_path / "vocab.txt")
    ref = paddle_tokenizer(vocab, do_lower_case=False)
    assert_same_as_paddle(build_tokenizer(vocab, lowercase=False), ref, HARD, MAX_SEQ_LEN)


def test_random_unicode_matches_paddlenlp(tmp_path):
    """Seeded strings of code points from all of Unicode (assigned or not) mixed with ASCII: every
    character class is checked, not only the ones someone thought of."""
    import random

    rng = random.Random(20240607)
    ascii_ = [chr(c) for c in range(0x20, 0x7F)] + list(" \t\n\u3000")
    pool = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    texts = [
        "".join(chr(rng.choice(pool)) if rng.random() < 0.5 else rng.choice(ascii_) for _ in range(rng.randint(0, 12)))
        for _ in range(3000)
    ]
    vocab = write_vocab(char_vocab(texts[::2], WORDPIECES), tmp_path / "vocab.txt")  # half the texts hit [UNK]
    assert_same_as_paddle(build_tokenizer(vocab), paddle_tokenizer(vocab), texts, 12)


def test_hard_strings_one_at_a_time_match_the_batch(full_tok):
    batch = encode_batch(full_tok, HARD, MAX_SEQ_LEN)
    for i, text in enumerate(HARD):
        one = encode_batch(full_tok, [text], MAX_SEQ_LEN)
        n = one.lengths[0]
        assert n == batch.lengths[i]
        assert (one.input_ids[0] == batch.input_ids[i, :n]).all()
        assert (one.offsets[0] == batch.offsets[i, :n]).all()


def test_wordpiece_is_exercised(full_tok):
    assert real_tokens(full_tok, "iPhone15 Pro售价7999元") == [
        ("iphone", "iPhone"),
        ("##15", "15"),
        ("pro", "Pro"),
        ("售", "售"),
        ("价", "价"),
        ("7", "7"),
        ("##9", "9"),
        ("##9", "9"),
        ("##9", "9"),
        ("元", "元"),
    ]
    # greedy longest match first, as ErnieTokenizer: "qu" wins although "q" + "##uick" is shorter
    assert [t for t, _ in real_tokens(full_tok, "The quick")] == ["the", "qu", "##i", "##c", "##k"]


def test_symbols_and_emoji_are_tokens_of_their_own(full_tok):
    assert real_tokens(full_tok, "25℃¥100×2©") == [
        ("2", "2"),
        ("##5", "5"),
        ("℃", "℃"),
        ("¥", "¥"),
        ("1", "1"),
        ("##0", "0"),
        ("##0", "0"),
        ("×", "×"),
        ("2", "2"),
        ("©", "©"),
    ]
    # a ZWJ family is its people (the joiners are dropped); a skin tone is a symbol of its own
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467"  # man ZWJ woman ZWJ girl
    assert [t for t, _ in real_tokens(full_tok, family + "👍🏽")] == ["👨", "👩", "👧", "👍", "🏽"]


# ----------------------------------------------------------------------------------------------------
# Offsets


def test_offsets_index_the_original_string(full_tok):
    # non-BMP emoji count as one character each, as in Python
    assert real_tokens(full_tok, "😀a😂b") == [("😀", "😀"), ("a", "a"), ("😂", "😂"), ("b", "b")]
    # full-width characters map one to one
    assert real_tokens(full_tok, "ＡＢ１") == [("ａ", "Ａ"), ("##ｂ", "Ｂ"), ("##１", "１")]
    # a combining accent is dropped and lies in no span; the precomposed one is inside its letter
    assert real_tokens(full_tok, "cafe\u0301 café") == [("cafe", "cafe"), ("cafe", "café")]
    # a character whose lowercase is two characters still maps to itself
    assert real_tokens(full_tok, "İs")[0] == ("i", "İ")
    # removed control characters and whitespace lie in no span
    enc = encode_batch(full_tok, ["  a\x00b\t中"], MAX_SEQ_LEN)
    assert enc.offsets[0, : enc.lengths[0]].tolist() == [[0, 0], [2, 3], [4, 5], [6, 7], [0, 0]]
    # an [UNK] spans the whole word it replaced
    assert real_tokens(full_tok, "x " + "b" * 101 + " x") == [("x", "x"), (UNK, "b" * 101), ("x", "x")]


def test_offsets_slice_to_the_token_on_every_hard_string(full_tok):
    """text[start:end], normalized as the tokenizer normalizes, is the token without "##"."""
    specials = {full_tok.token_to_id(t) for t in SPECIALS}
    enc = encode_batch(full_tok, HARD, MAX_SEQ_LEN)
    for i, text in enumerate(HARD):
        text = text.replace("\ud800", "\ufffd")
        n = enc.lengths[i]
        prev_end, prev = 0, None
        for pos in range(n):
            tid, (a, b) = int(enc.input_ids[i, pos]), enc.offsets[i, pos].tolist()
            assert 0 <= a <= b <= len(text)
            if pos in (0, n - 1):
                assert (tid, a, b) == (full_tok.token_to_id(CLS if pos == 0 else SEP), 0, 0)
                continue
            assert a >= prev_end or (a, b) == prev, (text, pos)
            prev_end, prev = b, (a, b)
            if tid in specials:  # typed special tokens, and [UNK]
                continue
            piece = full_tok.id_to_token(tid).removeprefix("##")
            normalized = full_tok.normalizer.normalize_str(text[a:b])
            # equal, except that a Hangul syllable's jamo pieces each span the syllable
            assert normalized == piece or (len(normalized) > 1 and piece in normalized), (text, pos, text[a:b], piece)
    assert (enc.offsets[enc.attention_mask == 0] == 0).all()


# ----------------------------------------------------------------------------------------------------
# Batching, truncation, padding


def test_batch_is_padded_to_the_longest_with_the_pad_id(full_tok):
    enc = encode_batch(full_tok, ["短", "长一点的文本", ""], MAX_SEQ_LEN)
    pad, cls, sep = (full_tok.token_to_id(t) for t in (PAD, CLS, SEP))
    assert enc.input_ids.shape == enc.token_type_ids.shape == (3, 8)
    assert enc.offsets.shape == (3, 8, 2)
    assert all(a.dtype == np.int64 for a in (enc.input_ids, enc.token_type_ids, enc.offsets, enc.lengths))
    assert enc.lengths.tolist() == [3, 8, 2]
    assert enc.input_ids[2].tolist() == [cls, sep] + [pad] * 6
    assert enc.input_ids[0, 3:].tolist() == [pad] * 5
    assert (enc.token_type_ids == 0).all()
    assert enc.attention_mask.tolist()[0] == [1, 1, 1, 0, 0, 0, 0, 0]
    assert not enc.truncated.any()


def test_truncation_keeps_cls_and_sep_and_is_reported(full_tok):
    cls, sep = full_tok.token_to_id(CLS), full_tok.token_to_id(SEP)
    enc = encode_batch(full_tok, ["中" * 300, "中国"], MAX_SEQ_LEN)
    assert enc.input_ids.shape == (2, MAX_SEQ_LEN)
    assert enc.lengths.tolist() == [MAX_SEQ_LEN, 4]
    assert enc.truncated.tolist() == [True, False]
    assert enc.input_ids[0, 0] == cls and enc.input_ids[0, MAX_SEQ_LEN - 1] == sep
    assert enc.offsets[0, MAX_SEQ_LEN - 2].tolist() == [MAX_SEQ_LEN - 3, MAX_SEQ_LEN - 2]
    # exactly full is not truncated; one more is
    fits = "中" * (MAX_SEQ_LEN - 2)
    assert encode_batch(full_tok, [fits, fits + "国"], MAX_SEQ_LEN).truncated.tolist() == [False, True]


def test_max_seq_len_can_change_between_calls(full_tok):
    text = "中" * 20
    assert encode_batch(full_tok, [text], 8).input_ids.shape == (1, 8)
    assert encode_batch(full_tok, [text], MAX_SEQ_LEN).input_ids.shape == (1, 22)
    assert encode_batch(full_tok, [text], 2).input_ids.shape == (1, 2)


def test_empty_batch(full_tok):
    enc = encode_batch(full_tok, [], MAX_SEQ_LEN)
    assert enc.input_ids.shape == (0, 0) and enc.offsets.shape == (0, 0, 2) and enc.lengths.shape == (0,)


def test_bad_arguments_are_explained(full_tok):
    with pytest.raises(ErnieDeployError, match="max_seq_len"):
        encode_batch(full_tok, ["x"], 1)
    with pytest.raises(ErnieDeployError, match="decode"):
        encode_batch(full_tok, [b"bytes"], MAX_SEQ_LEN)


# ----------------------------------------------------------------------------------------------------
# Building, saving, loading


def test_save_and_load_give_the_same_ids(vocabs, tmp_path):
    out = save_tokenizer(vocabs["full"], tmp_path / "tokenizer.json")
    assert out == tmp_path / "tokenizer.json"
    assert [p.name for p in tmp_path.iterdir()] == ["tokenizer.json"]  # nothing half-written left behind
    config = json.loads(out.read_text(encoding="utf-8"))
    assert config["truncation"] is None and config["padding"] is None
    assert config["model"]["max_input_chars_per_word"] == 100
    built = encode_batch(build_tokenizer(vocabs["full"]), HARD, MAX_SEQ_LEN)
    (tmp_path / "vocab.txt").write_bytes(vocabs["full"].read_bytes())
    for source in (out, tmp_path / "vocab.txt", tmp_path):
        loaded = encode_batch(load_tokenizer(source), HARD, MAX_SEQ_LEN)
        assert (loaded.input_ids == built.input_ids).all() and (loaded.offsets == built.offsets).all()


def test_ids_come_from_the_vocab_file(tmp_path):
    vocab = write_vocab(["[PAD]", "x", "[UNK]", "[CLS]", "[SEP]", "a", "##b", "a"], tmp_path / "vocab.txt")
    tok = build_tokenizer(vocab)
    assert tok.token_to_id(PAD) == 0 and tok.token_to_id(UNK) == 2
    assert tok.token_to_id("a") == 7  # a repeated token keeps its last line, as in paddlenlp
    assert tok.token_to_id("[MASK]") is None  # not invented when the vocab lacks it
    assert encode_batch(tok, ["ab c"], 8).input_ids[0].tolist() == [3, 7, 6, 2, 4]


def test_vocab_and_tokenizer_errors_are_explained(tmp_path):
    with pytest.raises(ErnieDeployError, match="no vocabulary file"):
        build_tokenizer(tmp_path / "missing.txt")
    with pytest.raises(ErnieDeployError, match=r"lacks \[CLS\], \[SEP\]"):
        build_tokenizer(write_vocab(["[PAD]", "[UNK]", "a"], tmp_path / "vocab.txt"))
    with pytest.raises(ErnieDeployError, match="no tokenizer"):
        load_tokenizer(tmp_path / "tokenizer.json")
    (tmp_path / "tokenizer.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ErnieDeployError, match="cannot read"):
        load_tokenizer(tmp_path / "tokenizer.json")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ErnieDeployError, match="neither tokenizer.json nor vocab.txt"):
        load_tokenizer(empty)


def test_lowercase_false_keeps_case_and_accents(tmp_path):
    vocab = write_vocab(list(SPECIALS) + ["C", "##a", "##f", "##é", "c", "##e"], tmp_path / "vocab.txt")
    tok = build_tokenizer(vocab, lowercase=False)
    assert real_tokens(tok, "Café") == [("C", "C"), ("##a", "a"), ("##f", "f"), ("##é", "é")]
    assert real_tokens(build_tokenizer(vocab), "Café") == [("c", "C"), ("##a", "a"), ("##f", "f"), ("##e", "é")]


def test_module_imports_no_paddle():
    """It runs inside Triton's python backend, where only numpy and tokenizers are installed."""
    code = (
        "import sys, ernie_deploy.serving.tokenizer, ernie_deploy.serving.encoding, ernie_deploy.serving.steps; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in {'paddle', 'paddlenlp', 'torch', 'sklearn'}); "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ----------------------------------------------------------------------------------------------------
# Text pairs


@pytest.mark.parametrize(
    ("first", "second", "budget", "kept"),
    [
        (3, 4, 10, (3, 4)),  # both fit
        (19, 20, 5, (3, 2)),  # level first, then the second gives first: the first keeps the odd token
        (20, 20, 6, (3, 3)),
        (30, 2, 10, (8, 2)),  # only the longer loses
        (2, 30, 10, (2, 8)),
        (0, 7, 3, (0, 3)),
    ],
)
def test_pair_lengths_cut_the_longer_text_first_and_the_second_on_a_tie(first, second, budget, kept):
    assert pair_lengths(first, second, budget) == kept


@pytest.mark.parametrize("max_seq_len", [3, 5, 8, 16, 32, MAX_SEQ_LEN])
def test_pairs_match_paddlenlp(thucnews, vocabs, max_seq_len):
    """Random title pairs (some a prefix of the other, some repeated to be long, so that ties and odd budgets
    occur): ids and token types equal ErnieTokenizer(text, text_pair), and `truncated` says when either was cut."""
    import random

    rng = random.Random(max_seq_len)
    texts, pairs = [], []
    for _ in range(300):
        a, b = rng.choice(thucnews["test"]), rng.choice(thucnews["test"])
        if rng.random() < 0.3:
            b = a[: rng.randint(1, len(a))]
        if rng.random() < 0.2:
            a = a * 3
        texts.append(a)
        pairs.append(b)
    tok, ref = build_tokenizer(vocabs["full"]), paddle_tokenizer(vocabs["full"])
    enc = encode_pairs(tok, texts, pairs, max_seq_len)
    for i, (a, b) in enumerate(zip(texts, pairs)):
        want = ref(a, b, max_length=max_seq_len, truncation=True)
        n = enc.lengths[i]
        assert enc.input_ids[i, :n].tolist() == want["input_ids"], (a, b)
        assert enc.token_type_ids[i, :n].tolist() == want["token_type_ids"], (a, b)
        assert enc.truncated[i] == (len(ref(a, b)["input_ids"]) > max_seq_len)
    assert (enc.input_ids[enc.attention_mask == 0] == tok.token_to_id(PAD)).all()
    # The single-text path is untouched by a pair call on the same tokenizer.
    assert_same_as_paddle(tok, ref, thucnews["test"][:100], max_seq_len)


def test_pair_offsets_index_each_text(full_tok):
    enc = encode_pairs(full_tok, ["国足公布"], ["世预赛名单"], MAX_SEQ_LEN)
    n, types = enc.lengths[0], enc.token_type_ids[0]
    spans = [tuple(x) for x in enc.offsets[0, :n].tolist()]
    firsts = [spans[i] for i in range(1, n - 1) if types[i] == 0 and spans[i] != (0, 0)]
    seconds = [spans[i] for i in range(n - 1) if types[i] == 1 and spans[i] != (0, 0)]
    assert ["国足公布"[a:b] for a, b in firsts] == list("国足公布")
    assert ["世预赛名单"[a:b] for a, b in seconds] == list("世预赛名单")


def test_pair_errors_name_the_problem(full_tok):
    with pytest.raises(ErnieDeployError, match="2 texts but 1 pairs"):
        encode_pairs(full_tok, ["a", "b"], ["c"], MAX_SEQ_LEN)
    with pytest.raises(ErnieDeployError, match="at least 3 for a pair"):
        encode_pairs(full_tok, ["a"], ["b"], 2)
    with pytest.raises(ErnieDeployError, match="not str"):
        encode_pairs(full_tok, ["a"], [b"b"], MAX_SEQ_LEN)


def test_truncation_or_padding_set_on_the_tokenizer_changes_nothing(vocabs):
    """A tokenizer.json saved with truncation or padding, or a caller that set them: each text is still tokenized
    whole and cut as the tokenizer step cuts it."""
    tok = build_tokenizer(vocabs["full"])
    want = encode_batch(tok, HARD, 16)
    tok.enable_truncation(5)
    tok.enable_padding(length=40)
    got = encode_batch(tok, HARD, 16)
    assert tok.truncation is None and tok.padding is None
    for name in ("input_ids", "token_type_ids", "offsets", "lengths", "truncated"):
        assert np.array_equal(getattr(got, name), getattr(want, name)), name
