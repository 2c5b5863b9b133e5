"""Reading a request body: its bytes, bounded before they are read, its JSON, and the texts each contract sends.

- SimpleServing: `{"data": {"text": str | [str], "text_pair": str | [str]}, "parameters": {...}}`; no other
  top-level key (its request model forbids extra fields).
- Hugging Face / TEI: `{"inputs": ..., "parameters": {...}}`. For a one-text model `inputs` is a text, a list of
  texts, or TEI's batch of one-text lists ([["a"], ["b"]]); for a pair model `[text, text_pair]` or a list of them.
  TEI's `truncate` and `truncation_direction` are accepted (the model reads a long text as it was built to:
  docs/LONG_TEXTS.md); `raw_scores: true` asks for every label's logit (function_to_apply "none").
- An extraction model (one that reads a schema) takes its schema as `parameters.schema` on every route (with_schema):
  Taskflow's forms, checked here so that a malformed one is refused by the field's name before Triton is asked."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from starlette.requests import Request

from ernie_deploy.core.errors import BadRequest
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.gateway.errors import GatewayError
from ernie_deploy.gateway.models import reads_schema
from ernie_deploy.serving.schema import parse_schema

# A refused body is read and thrown away up to this many bytes past --max-body-bytes, for at most DISCARD_S seconds,
# before its 413 is sent (read_body): 64 MiB holds any body a client would send by mistake many times over (an 8 MB
# one against the default 4 MiB limit) and at the bound cost the gateway 19-48 ms of CPU a request and no memory
# (docs/BENCHMARKS.md, Refused bodies); 30 s is nginx's default lingering_time, the longest a slow client is waited.
DISCARD_BYTES = 64 * 1024 * 1024
DISCARD_S = 30.0

BODY_FIX = (
    "send at most --max-body-bytes bytes (fewer or shorter texts per request), or start the gateway with a "
    "larger --max-body-bytes"
)


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 once it is known to be over `limit` bytes: by its Content-Length, or while a body
    without one (chunked) is streamed in. A refused body of up to `limit` + DISCARD_BYTES is read to its end and
    thrown away before the 413 is sent, so that a client that sends its whole body before it reads (Python's
    urllib.request) reads the 413 instead of a reset connection (the lingering close nginx does); a larger one, or
    one that takes over DISCARD_S to come in, is answered at once and its connection closed."""
    request.state.body_read = True
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise GatewayError(
                400,
                "validation",
                f"Content-Length {declared!r} is not a number of bytes",
                fix="send the body's length in bytes",
            )
        if int(declared) > limit:
            size = f"{int(declared):,}"
            if int(declared) > limit + DISCARD_BYTES:
                raise too_large(size, limit, read=False)
            raise too_large(size, limit, read=await _discard(request.stream(), 0, limit + DISCARD_BYTES))
    chunks, size = [], 0
    stream = request.stream()
    async for chunk in stream:
        size += len(chunk)
        if size > limit:
            chunks.clear()  # what was kept is freed before the rest is discarded
            raise too_large(f"more than {limit:,}", limit, read=await _discard(stream, size, limit + DISCARD_BYTES))
        chunks.append(chunk)
    return b"".join(chunks)


async def _discard(stream: AsyncIterator[bytes], size: int, bound: int) -> bool:
    """Whether the rest of the body came in, read and dropped chunk by chunk (none is kept), within `bound` bytes in
    all and DISCARD_S seconds."""

    async def drain() -> bool:
        nonlocal size
        async for chunk in stream:
            size += len(chunk)
            if size > bound:
                return False
        return True

    try:
        async with asyncio.timeout(DISCARD_S):
            return await drain()
    except TimeoutError:
        return False


async def discard_unread(request: Request, limit: int, refusal: GatewayError) -> None:
    """Before `refusal` is sent for a request refused before its body was read (an unknown model, an overloaded
    gateway): the body read and thrown away as read_body does with one over the limit, so that a client that sends
    its whole body before it reads gets the answer too. A body past `limit` + DISCARD_BYTES or DISCARD_S is not read
    to its end, and the connection is closed after the answer."""
    if getattr(request.state, "body_read", False):
        return
    declared, bound = request.headers.get("content-length"), limit + DISCARD_BYTES
    fits = declared is None or (declared.isdigit() and int(declared) <= bound)
    if not (fits and await _discard(request.stream(), 0, bound)):
        refusal.headers["Connection"] = "close"


def too_large(size: str, limit: int, read: bool = True) -> GatewayError:
    """The 413 of a body over `limit`; `read`: whether the body was read to its end (else the connection is closed
    after the answer: the rest of the body is not read)."""
    return GatewayError(
        413,
        "validation",
        f"the request body is {size} bytes, over this gateway's limit of {limit:,} (--max-body-bytes)",
        fix=BODY_FIX,
        headers={} if read else {"Connection": "close"},
    )


CAP_FLAG = "--max-client-batch-size"


def token_ids(value) -> bool:
    """Whether `value` is a list of token ids (OpenAI's and TEI's other form of an input): these models read text,
    tokenized by their own step, so such an input is refused by name rather than read as numbers."""
    return isinstance(value, list) and bool(value) and all(type(v) is int for v in value)


def cap_texts(count: int, limit: int, held: str, *, status: int = 413, loc: list | None = None) -> None:
    """Refuse a request of more than `limit` texts (the gateway's --max-client-batch-size, TEI's
    max_client_batch_size) by name, before Triton is asked: `held` says what holds them ("inputs holds", "the
    request holds"). TEI answers 413 validation; the OpenAI route passes its own status (400) and the field (`loc`)."""
    if count > limit:
        raise GatewayError(
            status,
            "validation",
            f"{held} {count} texts, over this gateway's limit of {limit} per request ({CAP_FLAG})",
            fix=f"send at most {limit} texts a request (split the list), or start the gateway with a larger {CAP_FLAG}",
            loc=loc,
        )


def parse_json(body: bytes) -> object:
    try:
        return json.loads(body)
    except UnicodeDecodeError as exc:
        raise GatewayError.invalid(
            f"the body is not UTF-8 ({exc.reason})", "send UTF-8 JSON", ["body"], "json_invalid"
        ) from None
    except json.JSONDecodeError as exc:
        raise GatewayError.invalid(
            f"the body is not JSON: {exc.msg} at character {exc.pos}",
            "send a JSON object",
            ["body", exc.pos],
            "json_invalid",
        ) from None


def _parameters(body: dict) -> dict:
    parameters = body.get("parameters")
    if parameters is None:
        return {}
    if not isinstance(parameters, dict):
        raise GatewayError.invalid(
            f"parameters is {type(parameters).__name__}",
            "send an object, or leave it out",
            ["body", "parameters"],
            "dict_type",
        )
    return parameters


def _texts(value, loc: list) -> list[str]:
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list):
        raise GatewayError.invalid(
            f"{loc[-1]} is {type(value).__name__}", "send a string or a list of strings", loc, "string_type"
        )
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise GatewayError.invalid(
                f"{loc[-1]}[{i}] is {type(text).__name__}", "send strings only", [*loc, i], "string_type"
            )
    return texts


def simple_serving(body: object, model: ModelSpec) -> tuple[list, dict]:
    """(items, parameters) of a SimpleServing request to `model`: texts, or (text, text_pair) pairs."""
    if not isinstance(body, dict):
        raise GatewayError.invalid(
            f"the body is a JSON {type(body).__name__}",
            'send {"data": {"text": [...]}, "parameters": {...}}',
            ["body"],
            "model_attributes_type",
        )
    extra = sorted(set(body) - {"data", "parameters"})
    if extra:
        raise GatewayError.invalid(
            f"unknown field {extra[0]!r}", "send only data and parameters", ["body", extra[0]], "extra_forbidden"
        )
    parameters = _parameters(body)
    data = body.get("data")
    if not isinstance(data, dict) or "text" not in data:
        raise GatewayError.invalid(
            "data holds no text" if isinstance(data, dict) else f"data is {type(data).__name__}",
            'send "data": {"text": [...]}',
            ["body", "data"],
            "missing",
        )
    texts = _texts(data["text"], ["body", "data", "text"])
    pairs = data.get("text_pair")
    takes_pairs = len(model.task_spec.inputs) > 1
    if pairs is None:
        if takes_pairs:
            raise GatewayError.invalid(
                f"data holds no text_pair, and {model.name} is a pair model",
                "send data.text_pair, a text per text",
                ["body", "data", "text_pair"],
                "missing",
            )
        return texts, parameters
    if not takes_pairs:
        raise GatewayError.invalid(
            f"data holds text_pair, but {model.name} takes one text",
            "leave text_pair out",
            ["body", "data", "text_pair"],
            "extra_forbidden",
        )
    pairs = _texts(pairs, ["body", "data", "text_pair"])
    if len(pairs) != len(texts):
        raise GatewayError.invalid(
            f"data holds {len(texts)} texts and {len(pairs)} text_pair",
            "send a text_pair per text",
            ["body", "data", "text_pair"],
        )
    return list(zip(texts, pairs)), parameters


def hugging_face(body: object, model: ModelSpec) -> tuple[list, bool, dict]:
    """(items, whether `inputs` was one input (not a batch), parameters) of a Hugging Face / TEI request."""
    if not isinstance(body, dict) or "inputs" not in body:
        raise GatewayError.invalid(
            "the body has no inputs", 'send {"inputs": "text", "parameters": {...}}', ["body", "inputs"], "missing"
        )
    parameters = _parameters(body)
    raw = body.get("raw_scores")
    if raw not in (None, True, False):
        raise GatewayError.invalid(f"raw_scores is {raw!r}", "send true or false", ["body", "raw_scores"])
    if raw:
        # TEI's raw scores are the logits: Hugging Face's function_to_apply "none", which a request may not contradict.
        if parameters.get("function_to_apply", "none") != "none":
            raise GatewayError.invalid(
                f"raw_scores is true and parameters.function_to_apply is {parameters['function_to_apply']!r}",
                "send one of them: raw_scores true for the logits, or function_to_apply",
                ["body", "raw_scores"],
            )
        parameters = {**parameters, "function_to_apply": "none", "top_k": parameters.get("top_k", 10**9)}
    inputs = body["inputs"]
    pair = len(model.task_spec.inputs) > 1

    def one(value) -> bool:
        return (not pair and isinstance(value, str)) or (
            pair and isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)
        )

    if one(inputs):
        return [tuple(inputs) if pair else inputs], True, parameters
    if isinstance(inputs, list) and inputs:
        items = []
        for i, value in enumerate(inputs):
            if not pair and isinstance(value, list) and len(value) == 1 and isinstance(value[0], str):
                value = value[0]  # TEI's batch of one-text sequences
            if not one(value):
                raise GatewayError.invalid(
                    f"inputs[{i}] is {json.dumps(value, ensure_ascii=False)[:80]}",
                    "send [text, text_pair] pairs" if pair else "send strings",
                    ["body", "inputs", i],
                    "string_type",
                )
            items.append(tuple(value) if pair else value)
        return items, False, parameters
    if isinstance(inputs, list):
        raise GatewayError(400, "empty", "inputs is an empty list", fix="send at least one text")
    shape = "a [text, text_pair] pair or a list of them" if pair else "a text or a list of texts"
    raise GatewayError.invalid(
        f"inputs is {type(inputs).__name__}, and {model.name} takes {shape}",
        f"send {shape}",
        ["body", "inputs"],
        "string_type",
    )


def with_schema(items: list, parameters: dict, model: ModelSpec) -> list:
    """`items` as sent to `model`. An extraction model gets each text with `parameters.schema` as JSON, the same for
    every text as Taskflow applies one schema to a call; without one, the texts alone, which the model answers with
    the schema it was built with. Another model's items are as they were (it reads no schema, as it reads no other
    parameter it does not know)."""
    schema = parameters.get("schema")
    if not reads_schema(model):
        return items
    loc = ["body", "parameters", "schema"]
    if schema is None:
        if model.schema is None:
            # Asked here rather than of Triton: the model's own refusal names its tensor, not this field.
            raise GatewayError(
                400,
                "validation",
                f"no schema: {model.name} was built without one, so each request names what to extract",
                fix='send parameters.schema (e.g. ["人物", "地点"]), or build the model with --schema',
                loc=loc,
                kind="missing",
            )
        return items

    try:
        parse_schema(schema)
    except BadRequest as exc:
        raise GatewayError.invalid(f"parameters.schema: {exc.problem}", exc.fix, loc) from None
    text = json.dumps(schema, ensure_ascii=False)
    return [(item, text) for item in items]
