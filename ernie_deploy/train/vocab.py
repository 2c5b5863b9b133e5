"""The bootstrap's vocabulary: a WordPiece vocab.txt built from train splits, and its [UNK] rate on other texts.

paddle and paddlenlp are imported inside functions: importing ernie_deploy stays paddle-free.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from pathlib import Path
from typing import Any

from ernie_deploy.core.errors import BadDataError
from ernie_deploy.fetch import data as data_mod
from ernie_deploy.fetch import datasets
from ernie_deploy.serving.tokenizer import build_tokenizer, is_cjk

SPECIAL_TOKENS = ("[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]")  # [PAD] must stay id 0
UNK = "[UNK]"


def _is_punct(ch: str) -> bool:
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def build_vocab(texts: list[str], min_word_freq: int = 2) -> list[str]:
    """A WordPiece vocabulary for `ErnieTokenizer` from the given (train) texts.

    Words are what paddlenlp's BasicTokenizer yields (lower-cased, accents stripped, CJK characters
    and punctuation split into single characters), so the vocabulary matches the tokenizer exactly.
    Entries: the special tokens ([PAD] = 0), every character seen, `##c` for every character seen that
    can continue a word (not CJK, not punctuation: WordPiece marks a whole word [UNK] if one piece is
    missing), and whole words seen at least `min_word_freq` times. Ordered by frequency, ties by text.
    """
    from paddlenlp.transformers.bert.tokenizer import BasicTokenizer

    basic = BasicTokenizer(do_lower_case=True)
    words: Counter[str] = Counter()
    for text in texts:
        words.update(basic.tokenize(text))
    chars: Counter[str] = Counter()
    for word, n in words.items():
        for ch in word:
            chars[ch] += n

    def by_freq(counter: Counter[str]) -> list[str]:
        return [tok for tok, _ in sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))]

    vocab = list(SPECIAL_TOKENS)
    seen = set(vocab)
    for tok in by_freq(chars):
        if tok not in seen:
            vocab.append(tok)
            seen.add(tok)
    for ch in by_freq(chars):
        if not (is_cjk(ch) or _is_punct(ch)) and f"##{ch}" not in seen:
            vocab.append(f"##{ch}")
            seen.add(f"##{ch}")
    for word in by_freq(words):
        if len(word) > 1 and words[word] >= min_word_freq and word not in seen:
            vocab.append(word)
            seen.add(word)
    return vocab


def write_vocab(vocab: list[str], path: Path) -> None:
    for tok in vocab:
        if not tok or any(c in tok for c in "\n\r") or tok != tok.strip():
            raise BadDataError(
                f"vocabulary entry {tok!r} cannot be written one per line",
                "drop the entry, or strip the whitespace and line breaks from it where it comes from (the base "
                "checkpoint's vocab.txt, or the training texts)",
            )
    path.write_text("\n".join(vocab) + "\n", encoding="utf-8")


def training_tokenizer(vocab_file: str | Path, max_seq_len: int | None = None):
    """The tokenizer training encodes with: the one the model is served with (serving.tokenizer, which gives the ids
    paddlenlp's ErnieTokenizer(vocab_file) gives, offsets included; tests/test_bootstrap.py checks every kind's rows
    against paddlenlp's), a text cut to `max_seq_len` tokens as ErnieTokenizer's `truncation=True` cuts it (a pair
    is cut by the sequence kind, kinds/sequence/train.py `_pair_ids`: the Rust cut breaks ties between the two texts
    the other way). Rust instead of paddlenlp's Python: MSRA's 2,000 first train sentences encoded with their offsets
    in 0.39 s against 5.1 s, the same rows (measured beside two training runs), which took the tagger's tokenize
    step from about a minute to seconds."""

    tokenizer = build_tokenizer(vocab_file, lowercase=True)  # ErnieTokenizer(vocab_file) lowercases
    if max_seq_len is not None:
        tokenizer.enable_truncation(max_seq_len)
    return tokenizer


def unk_rate(tokenizer, texts: list[str]) -> dict[str, float]:
    """Share of [UNK] among the word pieces of `texts` (a `training_tokenizer` without a length: no truncation; no
    [CLS]/[SEP])."""
    unk_id = tokenizer.token_to_id(UNK)
    total = unk = texts_with_unk = 0
    for text in texts:
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        n = sum(1 for i in ids if i == unk_id)
        total += len(ids)
        unk += n
        texts_with_unk += n > 0
    return {
        "token_rate": unk / total if total else 0.0,
        "texts_with_unk": texts_with_unk / len(texts) if texts else 0.0,
        "tokens": total,
    }


def vocab_sources(data_dir: Path, recipe: dict[str, Any]) -> dict[str, Path]:
    """dataset -> train file whose texts build the vocabulary: the task's own train split always, plus the
    train splits of the recipe's `vocab_datasets` (prepared, i.e. fetched, when needed)."""
    sources = {recipe["dataset"]: data_mod.split_file(data_dir, "train", recipe["split_format"])}
    for name in sorted(recipe["vocab_datasets"]):
        if name not in sources:
            spec = datasets.DATASETS[name]
            sources[name] = data_mod.split_file(datasets.prepare(name), "train", spec.split_format)
    return sources
