"""ERNIE's tokenizer as a `tokenizers` (Rust) pipeline: the same ids as paddlenlp's ErnieTokenizer, fast.

This module runs inside Triton's python backend, so it imports only the standard library and `tokenizers`
(never paddle or paddlenlp; tests compare against paddlenlp). It builds the tokenizer; serving.encoding turns texts
into the model's inputs with it (placing [CLS] and [SEP] itself, around the tokens its cut keeps).

What ErnieTokenizer (paddlenlp 2.8) does, and the piece below that does the same:

1. ErnieTokenizer.from_pretrained(dir) keeps special tokens typed in the text
   ("[SEP]", case-sensitive) whole; ErnieTokenizer(vocab_file) does not           -> added special tokens,
                                                                                     if match_special_tokens
2. lowercase, one character at a time (so no Greek final-sigma rule)               -> Lowercase
3. drop NUL, U+FFFD and every category C* character except tab/CR/LF               -> Replace(_REMOVE, "")
4. split on whitespace, and put each CJK ideograph in a word of its own            -> WhitespaceSplit, Split
5. strip accents: NFD, then drop category Mn                                       -> NFD, Replace(_MN, "")
6. make every punctuation (ASCII non-alphanumerics, P*) and symbol (S* plus a few
   listed code points) a word of its own                                           -> Split (isolated)
7. greedy longest-match WordPiece with "##" continuations; a word longer than 100
   characters, or one with a part not in the vocab, becomes [UNK]                  -> WordPiece
8. [CLS] A [SEP] (pairs: [CLS] A [SEP] B [SEP], type ids 0/1)                      -> TemplateProcessing

Why not `BertNormalizer` + `BertPreTokenizer` (the `BertWordPieceTokenizer` pipeline)? They agree with
ErnieTokenizer on Chinese, English, digits, accents and full-width text, but (measured, tokenizers 0.23):
they put a whole word holding a symbol (℃ ¥ × © ™, emoji) into one [UNK] where ErnieTokenizer splits the
symbol off; their character tables are older than Python's, so they keep unassigned code points that
ErnieTokenizer drops and miss combining marks and punctuation added since (about 1% of random strings of
assigned characters differed); and their CJK range has a typo (U+2B920 for U+2B820). So every character
class here is computed from Python's `unicodedata` - the table ErnieTokenizer itself consults - when the
tokenizer is built, and frozen into tokenizer.json. A tokenizer.json therefore matches ErnieTokenizer
running on a Python with the same Unicode version as the one that built it (Python 3.11: Unicode 14);
the classes differ between versions only in characters new in the later one.
"""

from __future__ import annotations

import json
import os
import unicodedata
from functools import cache
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from ernie_deploy.core.errors import BadCheckpointError
from ernie_deploy.core.files import atomic_path

UNK, CLS, SEP, PAD, MASK = "[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"
TOKENIZER_CONFIG = "tokenizer_config.json"
REQUIRED_SPECIALS = (PAD, CLS, SEP, UNK)
SPECIALS = (PAD, CLS, SEP, MASK, UNK)
MAX_INPUT_CHARS_PER_WORD = 100  # paddlenlp's WordpieceTokenizer default

# CJK ideograph blocks, as paddlenlp's BasicTokenizer lists them (the same as Google BERT's).
_CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)


def is_cjk(ch: str) -> bool:
    """Whether `ch` is a CJK ideograph: a word of its own to ErnieTokenizer, and never a word's continuation."""
    cp = ord(ch)
    return any(lo <= cp <= hi for lo, hi in _CJK_RANGES)


# Code points ErnieTokenizer treats as symbols although their category is not S*.
_EXTRA_SYMBOLS = (0x00AD, 0x00B2, 0x00BA, 0x3007, 0x00B5, 0x00D8, 0x014B, 0x01B1)


# ----------------------------------------------------------------------------------------------------
# Character classes, from Python's unicodedata (what ErnieTokenizer consults)


_ASCII_PUNCT = frozenset(list(range(33, 48)) + list(range(58, 65)) + list(range(91, 97)) + list(range(123, 127)))


def _kind(cp: int) -> str:
    """How ErnieTokenizer treats one code point (read from its paddlenlp 2.8 BasicTokenizer):

    "remove"   _clean_text drops it: NUL, U+FFFD, category C* except tab/CR/LF
    "mn"       a combining mark (Mn): dropped when accents are stripped (after NFD)
    "isolate"  a word of its own: CJK ideograph, punctuation (all non-alphanumeric ASCII, which includes
               "$ ^ `" that are not P*, and P*) or symbol (S*, plus _EXTRA_SYMBOLS)
    ""         anything else
    """
    if cp in (0, 0xFFFD):
        return "remove"
    cat = unicodedata.category(chr(cp))
    if cat[0] == "C":
        return "" if cp in (0x09, 0x0A, 0x0D) else "remove"
    if cat == "Mn":
        return "mn"
    if cat[0] in "PS" or cp in _ASCII_PUNCT or cp in _EXTRA_SYMBOLS or is_cjk(chr(cp)):
        return "isolate"
    return ""


@cache
def _classes() -> dict[str, str]:
    """kind -> an Oniguruma character class matching exactly its code points (surrogates left out:
    they cannot reach Rust). Computed once per process; frozen into tokenizer.json."""
    ranges: dict[str, list[str]] = {"remove": [], "mn": [], "isolate": []}
    run_kind, run_start = "", 0
    for cp in range(0x110001):
        kind = "" if cp > 0x10FFFF or 0xD800 <= cp <= 0xDFFF else _kind(cp)
        if kind != run_kind:
            if run_kind:
                end = cp - 1
                ranges[run_kind].append(
                    f"\\x{{{run_start:X}}}" if run_start == end else f"\\x{{{run_start:X}}}-\\x{{{end:X}}}"
                )
            run_kind, run_start = kind, cp
    return {kind: "[" + "".join(parts) + "]" for kind, parts in ranges.items()}


# ----------------------------------------------------------------------------------------------------
# Vocabulary


def read_vocab(vocab_file: str | os.PathLike) -> dict[str, int]:
    """token -> id exactly as paddlenlp reads vocab.txt: one token per line, id = line number
    (a repeated token keeps its last line)."""
    path = Path(vocab_file)
    if not path.is_file():
        raise BadCheckpointError(f"no vocabulary file at {path}", "pass the vocab.txt saved with the model")
    vocab: dict[str, int] = {}
    with open(path, encoding="utf-8") as fh:
        for index, line in enumerate(fh):
            vocab[line.rstrip("\n")] = index
    missing = [t for t in REQUIRED_SPECIALS if t not in vocab]
    if missing:
        raise BadCheckpointError(
            f"{path} is not an ERNIE vocabulary: it lacks {', '.join(missing)}",
            "pass the vocab.txt that came with the model (one token per line, with [PAD] [CLS] [SEP] [UNK])",
        )
    return vocab


# ----------------------------------------------------------------------------------------------------
# The tokenizer


def _pipeline(lowercase: bool, model: models.Model) -> Tokenizer:
    """Normalizer and pre-tokenizer (see the module docstring for why each piece is there)."""
    classes = _classes()
    tok = Tokenizer(model)
    steps = [normalizers.Replace(Regex(classes["remove"]), "")]  # _clean_text's removals
    if lowercase:
        # ErnieTokenizer lowercases character by character, then strips accents: NFD, drop Mn.
        # Lowercase before removal is equivalent: no lowercase mapping yields a C* character.
        steps += [normalizers.Lowercase(), normalizers.NFD(), normalizers.Replace(Regex(classes["mn"]), "")]
    tok.normalizer = normalizers.Sequence(steps)
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            # Splits on White_Space: every such character is one Python's str.split() splits on,
            # or a control character already removed.
            pre_tokenizers.WhitespaceSplit(),
            # CJK ideographs, punctuation and symbols, one character per word. Matching after NFD is
            # the same as ErnieTokenizer's test before it: NFD maps CJK compatibility ideographs to CJK
            # ideographs, and nothing else into or out of the CJK blocks.
            pre_tokenizers.Split(Regex(classes["isolate"]), behavior="isolated"),
        ]
    )
    return tok


def vocab_lowercase(vocab_file: str | os.PathLike) -> bool:
    """The do_lower_case of the tokenizer_config.json beside vocab.txt (PaddleNLP's tokenizer save_pretrained
    writes it there, and so does `ernie-deploy export`); True, ERNIE's default, when there is none."""
    config = Path(vocab_file).with_name(TOKENIZER_CONFIG)
    if not config.is_file():
        return True
    try:
        value = json.loads(config.read_text(encoding="utf-8")).get("do_lower_case", True)
    except (ValueError, AttributeError):
        raise BadCheckpointError(
            f"{config} is not a JSON object", "replace it with the tokenizer_config.json saved with the model"
        ) from None
    if not isinstance(value, bool):
        raise BadCheckpointError(f"{config}: do_lower_case is {value!r}, not true or false", "set it to true or false")
    return value


def build_tokenizer(
    vocab_file: str | os.PathLike, *, lowercase: bool | None = None, match_special_tokens: bool = False
) -> Tokenizer:
    """A `tokenizers.Tokenizer` that gives the ids paddlenlp's ErnieTokenizer(vocab_file) gives.

    lowercase: ErnieTokenizer's do_lower_case (lowercasing and stripping accents). None: as the
    tokenizer_config.json beside vocab.txt says, else True (see `vocab_lowercase`).
    match_special_tokens: whether "[SEP]", "[CLS]", "[MASK]", "[UNK]" or "[PAD]" typed in the text become
    that special token. ErnieTokenizer(vocab_file), which this project trains and evaluates with, reads
    them as ordinary text (False); ErnieTokenizer.from_pretrained(dir) matches them (True).
    Not configured for truncation or padding: serving.encoding tokenizes each text whole and cuts it there.
    """
    vocab = read_vocab(vocab_file)
    tok = _pipeline(
        vocab_lowercase(vocab_file) if lowercase is None else lowercase,
        models.WordPiece(
            vocab, unk_token=UNK, continuing_subword_prefix="##", max_input_chars_per_word=MAX_INPUT_CHARS_PER_WORD
        ),
    )
    tok.post_processor = processors.TemplateProcessing(
        single=f"{CLS} $A {SEP}",
        pair=f"{CLS} $A {SEP} $B:1 {SEP}:1",
        special_tokens=[(CLS, vocab[CLS]), (SEP, vocab[SEP])],
    )
    if match_special_tokens:
        # Matched in the raw text, before lowercasing, so "[sep]" stays ordinary text, as in paddlenlp.
        # Only those in the vocab: adding others would invent new ids.
        tok.add_special_tokens([t for t in SPECIALS if t in vocab])
    tok.decoder = decoders.WordPiece(prefix="##")
    return tok


def save_tokenizer(
    vocab_file: str | os.PathLike,
    out_path: str | os.PathLike,
    *,
    lowercase: bool | None = None,
    match_special_tokens: bool = False,
) -> Path:
    """Build the tokenizer from vocab.txt (see `build_tokenizer`) and write it as tokenizer.json, atomically."""
    tok = build_tokenizer(vocab_file, lowercase=lowercase, match_special_tokens=match_special_tokens)
    out = Path(out_path)
    with atomic_path(out, suffix=".json") as tmp:
        tok.save(str(tmp))
    return out


def load_tokenizer(path: str | os.PathLike) -> Tokenizer:
    """Load tokenizer.json; or build from vocab.txt with the defaults of `build_tokenizer`; or, given a
    folder, use its tokenizer.json, else its vocab.txt."""
    path = Path(path)
    if path.is_dir():
        for name in ("tokenizer.json", "vocab.txt"):
            if (path / name).is_file():
                return load_tokenizer(path / name)
        raise BadCheckpointError(f"{path} holds neither tokenizer.json nor vocab.txt", "pass the model's vocab.txt")
    if not path.is_file():
        raise BadCheckpointError(f"no tokenizer at {path}", "pass tokenizer.json or the model's vocab.txt")
    if path.suffix == ".json":
        try:
            return Tokenizer.from_file(str(path))
        except Exception as exc:  # tokenizers raises a bare Exception on bad JSON
            raise BadCheckpointError(
                f"cannot read {path} as a tokenizer: {exc}", "rewrite it with `save_tokenizer(vocab.txt, path)`"
            ) from None
    return build_tokenizer(path)
