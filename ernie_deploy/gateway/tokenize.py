"""text-embeddings-inference's `/tokenize` on `POST /hf/<model>/tokenize`: each text's tokens as the served model's
own tokenizer makes them, answered by the gateway from the tokenizer.json the model is served with, without asking
Triton (so it answers while the model loads, and costs Triton nothing).

The body is TEI's: `{"inputs": text | [text, ...], "add_special_tokens": true}` (true when left out). TEI's
`/tokenize` takes texts only, so a pair model's texts are tokenized one at a time too, and a `[text, text_pair]`
pair is refused by name. TEI's `prompt_name` is refused unless null (these models have no prompts); other fields
are ignored, as TEI ignores them.

The answer is TEI's: a list per input (one text sent alone is a list of one list), of one
`{"id", "text", "special", "start", "stop"}` per token:
- a token of the text: `start` and `stop` are character offsets into the text as sent (Python str indices, stop
  exclusive), and `text` is `text[start:stop]`, the characters the token was made from, as TEI answers it: the
  original case and accents (the token itself is lowercased, `GET /info` lists no vocabulary), and for an [UNK] the
  whole word it stands for;
- [CLS] and [SEP], with add_special_tokens: `special` true, `text` the token's name, `start` and `stop` null (TEI's
  convention: they come from no character of the text).

The tokens are those the tokenizer step feeds the model (serving.encoding.tokenize_whole, the one tokenization
every consumer of the model's inputs calls), whole: not cut to max_seq_len, so a client sees how many a text has; the
model reads the first max_seq_len - 2 of them, or all of them in windows (`long_text`, `max_seq_len` in GET /info).
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

from tokenizers import Tokenizer

from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.gateway.bodies import cap_texts
from ernie_deploy.gateway.errors import GatewayError
from ernie_deploy.gateway.models import ServedModel
from ernie_deploy.serving.encoding import tokenize_whole
from ernie_deploy.serving.parameters import TOKENIZER_FILE
from ernie_deploy.serving.tokenizer import CLS, SEP, load_tokenizer

# A lone surrogate (JSON's "\ud800") cannot be written back as UTF-8: in a token's `text` it is shown as U+FFFD,
# one code point for one, so every offset stays in place (the tokenizer drops both alike).
_SURROGATE = re.compile("[\ud800-\udfff]")
REBUILD = "rebuild the model (`ernie-deploy build`), which writes its tokenizer.json"


def parse(body: object, model: ServedModel, max_texts: int) -> tuple[list[str], bool]:
    """(texts, add_special_tokens) of a TEI /tokenize body: at most `max_texts` texts (--max-client-batch-size), each
    text and the request within the model's character limits (the limits its tokenizer step holds every request
    to), checked before any tokenization."""
    fix = 'send {"inputs": "text"} or {"inputs": ["text", ...]}'
    if not isinstance(body, dict) or "inputs" not in body:
        raise GatewayError.invalid("the body has no inputs", fix, ["body", "inputs"], "missing")
    special = body.get("add_special_tokens", True)
    if not isinstance(special, bool):
        raise GatewayError.invalid(
            f"add_special_tokens is {_shown(special)}",
            "send true or false, or leave it out (true)",
            ["body", "add_special_tokens"],
            "bool_type",
        )
    if body.get("prompt_name") is not None:
        raise GatewayError.invalid(
            f"prompt_name is {_shown(body['prompt_name'])}, and {model.name} has no prompts",
            "leave prompt_name out",
            ["body", "prompt_name"],
        )
    inputs = body["inputs"]
    texts = [inputs] if isinstance(inputs, str) else inputs
    if not isinstance(texts, list):
        raise GatewayError.invalid(f"inputs is {_shown(inputs)}", fix, ["body", "inputs"], "string_type")
    if not texts:
        raise GatewayError(400, "empty", "inputs is an empty list", fix="send at least one text")
    cap_texts(len(texts), max_texts, "inputs holds")
    for i, text in enumerate(texts):
        if isinstance(text, list):
            raise GatewayError.invalid(
                f"inputs[{i}] is a list {_shown(text)}: TEI's /tokenize takes texts, not pairs",
                "send each text as an input of its own (a pair's two texts are tokenized alone too)",
                ["body", "inputs", i],
                "string_type",
            )
        if not isinstance(text, str):
            raise GatewayError.invalid(f"inputs[{i}] is {_shown(text)}", "send strings only", ["body", "inputs", i])
    limits = model.limits
    for i, text in enumerate(texts):
        problem = limits.text_problem(text)
        if problem:
            raise GatewayError(413, "validation", f"inputs[{i}] {problem}", fix=limits.text_fix)
    problem = limits.request_problem(sum(len(text) for text in texts), len(texts))
    if problem:
        raise GatewayError(413, "validation", problem, fix=limits.request_fix)
    return texts, special


def _shown(value) -> str:
    return json.dumps(value, ensure_ascii=False)[:80]


def tokens(tokenizer: Tokenizer, texts: list[str], special: bool) -> list[list[dict]]:
    """Each text's tokens in TEI's shape (the module's docstring), [CLS] and [SEP] around them where `special`."""
    cls = {"id": tokenizer.token_to_id(CLS), "text": CLS, "special": True, "start": None, "stop": None}
    sep = {"id": tokenizer.token_to_id(SEP), "text": SEP, "special": True, "start": None, "stop": None}
    out = []
    for text, encoding in zip(texts, tokenize_whole(tokenizer, texts)):
        shown = text if text.isascii() else _SURROGATE.sub("\ufffd", text)
        row = [
            # A special token typed in the text (a tokenizer.json that matches them) is special as TEI marks it.
            {"id": i, "text": token, "special": True, "start": None, "stop": None}
            if mask
            else {"id": i, "text": shown[start:stop], "special": False, "start": start, "stop": stop}
            for i, token, (start, stop), mask in zip(
                encoding.ids, encoding.tokens, encoding.offsets, encoding.special_tokens_mask
            )
        ]
        out.append([cls, *row, sep] if special else row)
    return out


def tokenizer_file(repository: Path, name: str) -> Path:
    """The tokenizer.json served model `name` is tokenized with: in the version folder of the step that tokenizes its
    texts (the shared tokenizer step, or the model's own step in the layouts that keep it there), the serving
    version's where that step holds the model's versions, else the newest version folder that holds it (what Triton
    loads)."""
    from ernie_deploy.repository.served import Existing
    from ernie_deploy.repository.versions import VersionedModel

    existing = Existing.read(repository)
    if name not in existing.configs:
        raise GatewayError(
            404, "not_found", f"{repository} serves no model {name!r}", fix="call a model GET /info lists"
        )
    for step in existing.steps(name):
        config = existing.configs.get(step)
        if config is None or TOKENIZER_FILE.name not in config.parameters:
            continue
        file = config.parameters[TOKENIZER_FILE.name].string_value or TOKENIZER_FILE.default
        versioned = VersionedModel.read(repository, name)
        if step in versioned.steps:
            return repository / step / str(versioned.serving_version()) / file
        numbered = sorted(
            (int(p.name) for p in (repository / step).iterdir() if p.name.isdigit() and (p / file).is_file()),
            reverse=True,
        )
        if numbered:
            return repository / step / str(numbered[0]) / file
        raise GatewayError(424, "backend", f"{repository / step} holds no version with {file}", fix=REBUILD)
    raise GatewayError(424, "backend", f"no step of {name!r} in {repository} names a tokenizer file", fix=REBUILD)


class Tokenizers:
    """The served models' tokenizers, each read once (off the event loop) from the file its model is served with,
    and read again when that file changes (a rebuild writes it anew): a stat per request."""

    def __init__(self, repository: Path):
        self.repository = Path(repository)
        self._paths: dict[tuple, Path] = {}  # per record served: a rollout or rebuild gives a new record
        self._loaded: dict[Path, tuple[int, Tokenizer]] = {}

    async def answer(self, model: ServedModel, body: object, max_texts: int) -> list[list[dict]]:
        texts, special = parse(body, model, max_texts)
        tokenizer = await self.get(model)
        # Off the event loop: a request of the most characters a model takes is seconds of tokenizing.
        return await asyncio.to_thread(tokens, tokenizer, texts, special)

    async def get(self, model: ServedModel) -> Tokenizer:
        path, stamp = await self._found(model)
        loaded = self._loaded.get(path)
        if loaded is None or loaded[0] != stamp:
            try:
                loaded = self._loaded[path] = (stamp, await asyncio.to_thread(load_tokenizer, path))
            except ErnieDeployError as exc:
                raise GatewayError(424, "backend", exc.problem, fix=exc.fix or REBUILD) from None
        return loaded[1]

    async def _found(self, model: ServedModel) -> tuple[Path, int]:
        """The model's tokenizer file and when it was written."""
        record = model.record
        key = (record.name, record.version, record.layout, record.tokenizer_sha256)
        path = self._paths.get(key)
        if path is not None:
            try:
                return path, path.stat().st_mtime_ns
            except OSError:
                pass  # moved since it was found (a rebuild): found again
        path = self._paths[key] = await asyncio.to_thread(tokenizer_file, self.repository, model.name)
        try:
            return path, path.stat().st_mtime_ns
        except OSError:
            del self._paths[key]
            raise GatewayError(424, "backend", f"{model.name}'s tokenizer {path} cannot be read", fix=REBUILD) from None
