"""What one request may cost: a limit on one text's length and on all the text one request carries, checked before
any tokenization, so a hostile or careless client cannot make a served model spend unbounded time or memory.

Limits count characters (Unicode code points), not tokens:
- characters can be counted before the tokenizer runs, and the tokenizer is itself a cost that grows with the text
  (about 4 us a character here, measured); a token limit could only be checked after paying for it;
- every cost after the tokenizer (windows, the model, decoding, offsets, the entities' JSON) grows linearly with the
  tokens, and the tokens with the characters: one per CJK character, one per one or more Latin letters, and at most
  a few for a character that Unicode decomposes into a letter and marks;
- a user can check them without the vocabulary, in the same unit their text editor shows.

What a character costs depends on how the model reads a text, so each reading has its own limits. A model that reads
the cut text (a classifier; NER with `--long-text head`) runs on max_seq_len tokens whatever the length: past the
tokenizer its cost is fixed. A model that reads the whole text in windows (NER's default) runs its tokens through
the model in windows of about its training length (1.8x the tokens of one reading for the demo NER model in sentence
windows, 2.1x in sliding ones; docs/LONG_TEXTS.md): measured with the demo NER model, about 0.08 ms a character on a
quiet host against 3 us for the classifier (docs/RELIABILITY.md, "Bounded cost per request"). A tokenizer shared by
models of both readings holds both, and holds each request to the limits of what it asks for (the window tensors, or
the cut).

Standard library and core only: runs inside Triton's python backend.
"""

from __future__ import annotations

from dataclasses import dataclass

from ernie_deploy.core.errors import BadRepositoryError
from ernie_deploy.serving.parameters import (
    CUT_MAX_REQUEST_CHARS,
    CUT_MAX_TEXT_CHARS,
    WINDOW_MAX_REQUEST_CHARS,
    WINDOW_MAX_TEXT_CHARS,
)


@dataclass(frozen=True)
class TextLimits:
    """The longest text, and the most characters in all the texts of one request."""

    max_text_chars: int
    max_request_chars: int

    def bytes_problem(self, item: bytes) -> str | None:
        """Why one raw text is refused before it is decoded (too many bytes to be within the limit), or None."""
        if len(item) > _UTF8_MAX_BYTES_PER_CHAR * self.max_text_chars:
            return (
                f"is {len(item):,} bytes, so more than the {self.max_text_chars:,} characters this model takes per "
                "text (max_text_chars)"
            )
        return None

    def text_problem(self, text: str) -> str | None:
        """Why one decoded text is refused for its length, or None."""
        if len(text) > self.max_text_chars:
            return f"has {len(text):,} characters, over this model's limit of {self.max_text_chars:,} (max_text_chars)"
        return None

    def request_problem(self, total_chars: int, texts: int) -> str | None:
        if total_chars > self.max_request_chars:
            return (
                f"the request carries {total_chars:,} characters in {texts} texts, over this model's limit of "
                f"{self.max_request_chars:,} per request (max_request_chars)"
            )
        return None

    @property
    def text_fix(self) -> str:
        return (
            f"send texts of at most {self.max_text_chars:,} characters (split a longer one), or rebuild the model with "
            "`ernie-deploy build --max-text-chars N` (docs/RELIABILITY.md gives the time and memory per character)"
        )

    @property
    def request_fix(self) -> str:
        return (
            f"send at most {self.max_request_chars:,} characters per request (fewer texts per request), or rebuild the "
            "model with `ernie-deploy build --max-request-chars N`"
        )


# The most bytes a character takes in UTF-8: a text of more bytes than 4 x the limit is refused before it is decoded.
_UTF8_MAX_BYTES_PER_CHAR = 4

# The defaults per reading: the longest text answered within a budget of about a second and a few hundred MB of server
# memory on 2 CPU cores with the demo models (benchmarks/input_cost.py; figures in docs/RELIABILITY.md), and a request
# of at most four such texts (a few seconds: a batch client sends many texts at once, most of them short). Windows:
# 10,000 characters of NER took 0.80 s and 20,000 took 1.66 s in sentence windows on 2 cores at load 1.2-1.6, so 8,000
# keeps the budget with some room for a busier host (the previous 4,000 was set on a host at load 4-6).
CUT = TextLimits(max_text_chars=100_000, max_request_chars=400_000)
WINDOWS = TextLimits(max_text_chars=8_000, max_request_chars=32_000)


@dataclass(frozen=True)
class ReadingLimits:
    """The limits a tokenizer enforces: for requests that read the cut text, and for those that read windows."""

    cut: TextLimits = CUT
    windows: TextLimits = WINDOWS

    # config parameter (serving.parameters) -> (reading, field). Each names its reading: a model's record has
    # `max_text_chars` and `max_request_chars` for the one reading it does, and a parameter never shares a record
    # field's name.
    LIMITS = {
        CUT_MAX_TEXT_CHARS: ("cut", "max_text_chars"),
        CUT_MAX_REQUEST_CHARS: ("cut", "max_request_chars"),
        WINDOW_MAX_TEXT_CHARS: ("windows", "max_text_chars"),
        WINDOW_MAX_REQUEST_CHARS: ("windows", "max_request_chars"),
    }
    # The same, by the parameter's name.
    PARAMETERS = {parameter.name: where for parameter, where in LIMITS.items()}

    @classmethod
    def given(cls, max_text_chars: int | None = None, max_request_chars: int | None = None) -> ReadingLimits:
        """The defaults, with what the user set (`build --max-text-chars/--max-request-chars`) for every reading. One
        set alone moves the other default where it must: a request limit below a reading's text limit lowers that
        text limit to it, a text limit above a reading's request limit raises that request limit to it."""

        def one(default: TextLimits) -> TextLimits:
            text = max_text_chars or min(default.max_text_chars, max_request_chars or default.max_text_chars)
            return TextLimits(text, max_request_chars or max(default.max_request_chars, text))

        return cls(one(CUT), one(WINDOWS))

    def reading(self, windows: bool) -> TextLimits:
        return self.windows if windows else self.cut

    def parameters(self) -> dict[str, int]:
        return {key: getattr(getattr(self, reading), field) for key, (reading, field) in self.PARAMETERS.items()}

    @classmethod
    def from_config(cls, config: dict) -> ReadingLimits:
        """From the config Triton hands a python step."""
        return cls.from_parameters({parameter.name: parameter.given(config) for parameter in cls.LIMITS}.get)

    @classmethod
    def from_parameters(cls, read) -> ReadingLimits:
        """From a model config's parameters (`read(key)` -> str, or None where absent). `build` writes all four; a
        config without them is refused (a model never runs unbounded), and one of them not a whole number of at
        least 1, by name."""
        missing = [key for key in cls.PARAMETERS if read(key) is None]
        if missing:
            raise BadRepositoryError(
                f"the tokenizer config has no {', '.join(missing)}: it was built by an older ernie-deploy",
                "rebuild the repository with `ernie-deploy build`, which writes the limits",
            )
        values = {"cut": {}, "windows": {}}
        for parameter, (reading, field) in cls.LIMITS.items():
            values[reading][field] = parameter.parse(read(parameter.name))
        return cls(TextLimits(**values["cut"]), TextLimits(**values["windows"]))
