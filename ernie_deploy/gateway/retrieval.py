"""text-embeddings-inference's retrieval routes, for the models of the embed and rerank kinds: their bodies read and
checked, and their answers made from what the model answers (kinds/embed, kinds/rerank).

- `POST /hf/<model>/embed` (an embed model): `{"inputs": text | [text, ...], "normalize": true, "truncate": false,
  "truncation_direction": "Right", "prompt_name": null}` -> `[[float, ...], ...]`, one vector per text (one text
  sent alone too). `POST /hf/<model>` answers the same body for an embed model: what
  InferenceClient.feature_extraction posts to a model URL.
- `POST /hf/<model>/similarity` (an embed model): `{"inputs": {"source_sentence": text, "sentences": [text, ...]},
  "parameters": {"truncate", "truncation_direction", "prompt_name"}}` -> `[cosine, ...]`, one per sentence;
  `POST /hf/<model>` answers it too (InferenceClient.sentence_similarity).
- `POST /hf/<model>/rerank` (a rerank model): `{"query": text, "texts": [text, ...], "raw_scores": false,
  "return_text": false, "truncate": false, "truncation_direction": "Right"}` -> `[{"index", "score", "text"?}]`,
  best first.

As TEI does: fields these routes do not read are ignored; a text (or a query and text pair) longer than the model
reads is refused unless `truncate` is true, then read as its head; more texts than --max-client-batch-size are
refused (a similarity's source sentence counts as one), all with 413 validation. The models keep a text's head, so
`truncation_direction` "Left" is refused by name. A model of another kind is refused as TEI refuses it (424).

The model cuts every text to its head and says which it cut (`truncated`), so the refusal of a long text comes from
the model's own answer: one Triton call, whose answers are dropped when a text was cut without `truncate`."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from ernie_deploy.core.tasks import TRUNCATED
from ernie_deploy.gateway.bodies import cap_texts, token_ids
from ernie_deploy.gateway.errors import GatewayError
from ernie_deploy.gateway.models import ServedModel
from ernie_deploy.kinds.embed import KIND as EMBED_KIND
from ernie_deploy.kinds.rerank import KIND as RERANK_KIND

EMBED = EMBED_KIND.name
RERANK = RERANK_KIND.name
# The one direction these models cut a long text in: they keep its head (TEI's "Right" cuts the tail off).
RIGHT = "Right"


@dataclass(frozen=True)
class Embed:
    texts: list[str]
    normalize: bool
    truncate: bool


@dataclass(frozen=True)
class Similarity:
    source: str
    sentences: list[str]
    truncate: bool

    @property
    def texts(self) -> list[str]:
        return [self.source, *self.sentences]


@dataclass(frozen=True)
class Rerank:
    query: str
    texts: list[str]
    raw_scores: bool
    return_text: bool
    truncate: bool


def _shown(value) -> str:
    return json.dumps(value, ensure_ascii=False)[:80]


def _object(body: object, fix: str) -> dict:
    if not isinstance(body, dict):
        raise GatewayError.invalid(f"the body is a JSON {type(body).__name__}", fix, ["body"], "dict_type")
    return body


def _flag(fields: dict, name: str, default: bool, loc: list) -> bool:
    value = fields.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise GatewayError.invalid(
            f"{name} is {_shown(value)}",
            f"send true or false, or leave it out ({'true' if default else 'false'})",
            [*loc, name],
            "bool_type",
        )
    return value


def _reading(fields: dict, loc: list) -> bool:
    """`truncate` (false when left out), with `truncation_direction` and `prompt_name` checked beside it."""
    direction = fields.get("truncation_direction")
    if direction is not None and direction != RIGHT:
        if direction == "Left":
            raise GatewayError.invalid(
                'truncation_direction is "Left", and this model reads a long text\'s head (it cuts the tail off)',
                'send "Right" or leave it out; to read a text\'s end, send its end',
                [*loc, "truncation_direction"],
            )
        raise GatewayError.invalid(
            f"truncation_direction is {_shown(direction)}",
            'send "Right", or leave it out (TEI\'s truncation_direction is "Left" or "Right", and this model reads '
            '"Right" alone)',
            [*loc, "truncation_direction"],
        )
    if fields.get("prompt_name") is not None:
        raise GatewayError.invalid(
            f"prompt_name is {_shown(fields['prompt_name'])}, and this model has no prompts",
            "leave prompt_name out (or send null)",
            [*loc, "prompt_name"],
        )
    return _flag(fields, "truncate", False, loc)


def _texts(value, loc: list, name: str) -> list[str]:
    if not isinstance(value, list):
        raise GatewayError.invalid(f"{name} is {_shown(value)}", "send a list of strings", loc, "list_type")
    for i, text in enumerate(value):
        if token_ids(text):
            raise GatewayError.invalid(
                f"{name}[{i}] is a list of token ids, and this gateway's models read text with their own tokenizer",
                "send each text as a string",
                [*loc, i],
                "string_type",
            )
        if not isinstance(text, str):
            raise GatewayError.invalid(f"{name}[{i}] is {_shown(text)}", "send strings only", [*loc, i], "string_type")
    return value


def _inputs(body: dict, limit: int) -> list[str]:
    """TEI's `inputs`: a text or a list of texts (a list of token ids refused by name), at most `limit`."""
    if "inputs" not in body:
        raise GatewayError.invalid("the body has no inputs", 'send {"inputs": "text"}', ["body", "inputs"], "missing")
    inputs = body["inputs"]
    if isinstance(inputs, str):
        return [inputs]
    if token_ids(inputs):
        raise GatewayError.invalid(
            "inputs is a list of token ids, and this gateway's models read text with their own tokenizer",
            "send the text as a string",
            ["body", "inputs"],
            "string_type",
        )
    texts = _texts(inputs, ["body", "inputs"], "inputs")
    if not texts:
        raise GatewayError(400, "empty", "inputs is an empty list", fix="send at least one text")
    cap_texts(len(texts), limit, "inputs holds")
    return texts


def is_similarity(body: object) -> bool:
    """Whether a body to an embed model's `POST /hf/<model>` is a sentence-similarity one (its `inputs` an object)."""
    return isinstance(body, dict) and isinstance(body.get("inputs"), dict)


def embed(body: object, limit: int) -> Embed:
    body = _object(body, 'send {"inputs": "text", "normalize": true}')
    parameters = body.get("parameters")
    if parameters not in (None, {}):
        # TEI reads its options at the body's top level; the same names under `parameters` would be ignored in silence.
        raise GatewayError.invalid(
            f"parameters is {_shown(parameters)}: TEI's embed body takes its options at the top level",
            'send them beside inputs ({"inputs": ..., "normalize": false, "truncate": true})',
            ["body", "parameters"],
        )
    texts = _inputs(body, limit)
    return Embed(texts, _flag(body, "normalize", True, ["body"]), _reading(body, ["body"]))


def similarity(body: object, limit: int) -> Similarity:
    fix = 'send {"inputs": {"source_sentence": "text", "sentences": ["text", ...]}}'
    body = _object(body, fix)
    inputs = body.get("inputs")
    if not isinstance(inputs, dict):
        raise GatewayError.invalid(
            f"inputs is {_shown(inputs)}" if "inputs" in body else "the body has no inputs",
            fix,
            ["body", "inputs"],
            "dict_type",
        )
    loc = ["body", "inputs"]
    source = inputs.get("source_sentence")
    if not isinstance(source, str):
        raise GatewayError.invalid(
            f"inputs.source_sentence is {_shown(source)}", "send a string", [*loc, "source_sentence"], "string_type"
        )
    sentences = _texts(inputs.get("sentences"), [*loc, "sentences"], "inputs.sentences")
    if not sentences:
        raise GatewayError(400, "empty", "inputs.sentences is an empty list", fix="send at least one sentence")
    # The source sentence is embedded with them: it counts as TEI counts it.
    cap_texts(len(sentences) + 1, limit, "inputs.source_sentence and inputs.sentences are")
    parameters = body.get("parameters")
    if parameters is None:
        parameters = {}
    if not isinstance(parameters, dict):
        raise GatewayError.invalid(
            f"parameters is {_shown(parameters)}",
            "send an object, or leave it out",
            ["body", "parameters"],
            "dict_type",
        )
    return Similarity(source, sentences, _reading(parameters, ["body", "parameters"]))


def rerank(body: object, limit: int) -> Rerank:
    body = _object(body, 'send {"query": "text", "texts": ["text", ...]}')
    query = body.get("query")
    if not isinstance(query, str):
        raise GatewayError.invalid(
            f"query is {_shown(query)}" if "query" in body else "the body has no query",
            "send the query as a string",
            ["body", "query"],
            "string_type",
        )
    if "texts" not in body:
        raise GatewayError.invalid("the body has no texts", 'send "texts": ["text", ...]', ["body", "texts"], "missing")
    texts = _texts(body["texts"], ["body", "texts"], "texts")
    if not texts:
        raise GatewayError(400, "empty", "texts is an empty list", fix="send at least one text to rank")
    # Each text is scored against the query as one pair: the pairs count, as TEI counts them.
    cap_texts(len(texts), limit, "texts holds")
    return Rerank(
        query,
        texts,
        raw_scores=_flag(body, "raw_scores", False, ["body"]),
        return_text=_flag(body, "return_text", False, ["body"]),
        truncate=_reading(body, ["body"]),
    )


def require(model: ServedModel, kind: str, route: str) -> None:
    """Refuse a model of another kind on a route of `kind` (424 backend, as TEI refuses an /embed of a classifier),
    naming the routes that answer it."""
    if model.record.kind == kind:
        return
    what = {EMBED: "an embedding (embed) model", RERANK: "a rerank model"}[kind]
    if model.record.kind == EMBED:
        fix = f"call POST /hf/{model.name}/embed or /hf/{model.name}/similarity, or a {kind} model"
    elif model.record.kind == RERANK:
        fix = f"call POST /hf/{model.name}/rerank or /hf/{model.name}/predict, or a {kind} model"
    else:
        fix = f"call POST /hf/{model.name} or /hf/{model.name}/predict, or a {kind} model"
    raise GatewayError(
        424,
        "backend",
        f"{model.name} is a {model.record.task} model, not {what}: {route} answers {kind} models only",
        fix=fix,
    )


def refuse_truncated(
    answers: dict[str, np.ndarray], model: ServedModel, named, fix: str, status: int = 413, loc: list | None = None
) -> None:
    """Refuse the request where the model cut a text (its `truncated` answer): the first one, `named(i)` naming it,
    with the model's limit and `fix`."""
    cut = np.asarray(answers[TRUNCATED.name]).reshape(-1)
    if not cut.any():
        return
    i = int(np.argmax(cut))
    limit = model.record.max_seq_len
    raise GatewayError(
        status,
        "validation",
        f"{named(i)} is longer than the {limit} tokens {model.name} reads ([CLS] and [SEP] included)",
        fix=fix,
        loc=loc,
    )


def truncate_fix(limit: int) -> str:
    return f"send truncate: true to read its first {limit} tokens, or shorten it"


def cosines(vectors: np.ndarray) -> list[float]:
    """The cosine of the first row of `vectors` [1 + n, dim] with each other row, as TEI's /similarity answers (a
    zero vector's cosine is 0: it has no direction)."""
    wide = vectors.astype(np.float64)
    norms = np.linalg.norm(wide, axis=-1)
    norms = np.where(norms > 0, norms, np.inf)
    return [float(c) for c in (wide[1:] @ wide[0]) / (norms[1:] * norms[0])]


def ranks(scores: np.ndarray, request: Rerank) -> list[dict]:
    """TEI's rerank answer: one {"index", "score"} per text (its "text" too with return_text), best first; texts of
    equal score in the order sent."""
    values = np.asarray(scores, dtype=np.float32).reshape(-1)
    if np.isnan(values).any():
        raise GatewayError(
            424, "backend", "the model answered a NaN score", fix="check the served model (`ernie-deploy check`)"
        )
    order = np.argsort(-values, kind="stable")
    out = []
    for i in order.tolist():
        rank = {"index": i, "score": float(values[i])}
        if request.return_text:
            rank["text"] = request.texts[i]
        out.append(rank)
    return out
