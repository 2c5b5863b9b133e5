"""OpenAI's embeddings API on the gateway, for the embed models: what the `openai` package's client posts to
`<base_url>/embeddings` and reads back, unchanged (`openai.OpenAI(base_url="http://HOST:8080/v1")`).

- `POST /v1/embeddings`: `{"model": name, "input": text | [text, ...], "encoding_format": "float" | "base64",
  "dimensions": n, "user": ...}` -> `{"object": "list", "data": [{"object": "embedding", "index": i, "embedding":
  [float, ...] | base64}], "model": name, "usage": {"prompt_tokens": n, "total_tokens": n}}`. The vectors are unit
  length (OpenAI's embeddings are); base64 is each vector's little-endian float32 bytes, what the client decodes
  (it asks base64 whenever its caller names no format). The tokens counted are the model's own, [CLS] and [SEP]
  included, as it read them.
- `GET /v1/models` (and `/v1/models/<name>`): the served models as OpenAI lists them.

What OpenAI's API refuses is refused here in its shape (gateway.errors.openai_response), with 400 unless said:
input as token ids (these models read text with their own tokenizer), an empty list, a text longer than the model
reads (OpenAI refuses an input past the model's context; TEI's route with `truncate: true` reads its head), more texts
than --max-client-batch-size, `dimensions` other than the model's own (its vectors are not shortened), an unknown
field, a model not served (404) or not an embed model."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass

import numpy as np

from ernie_deploy.gateway.bodies import cap_texts, token_ids
from ernie_deploy.gateway.errors import GatewayError
from ernie_deploy.gateway.models import ServedModel

FORMATS = ("float", "base64")
FIELDS = ("model", "input", "encoding_format", "dimensions", "user")
# Who owns a listed model, as OpenAI's model objects say.
OWNER = "ernie-deploy"


def bad(problem: str, fix: str, param: str, status: int = 400) -> GatewayError:
    """A request OpenAI's API refuses (400, invalid_request_error), naming its field."""
    return GatewayError(status, "validation", problem, fix=fix, loc=["body", param])


@dataclass(frozen=True)
class EmbeddingsRequest:
    model: str
    texts: list[str]
    encoding_format: str
    dimensions: int | None


def _shown(value) -> str:
    return json.dumps(value, ensure_ascii=False)[:80]


def _texts(value) -> list[str]:
    ids = "these models read text with their own tokenizer, not token ids"
    if isinstance(value, str):
        texts = [value]
    elif token_ids(value):
        raise bad(f"input is a list of token ids: {ids}", "send the text as a string", "input")
    elif isinstance(value, list):
        texts = value
        for i, text in enumerate(texts):
            if token_ids(text):
                raise bad(f"input[{i}] is a list of token ids: {ids}", "send each text as a string", "input")
            if not isinstance(text, str):
                raise bad(f"input[{i}] is {_shown(text)}", "send strings only", "input")
    else:
        raise bad(f"input is {_shown(value)}", "send a string or a list of strings", "input")
    if not texts:
        raise bad("input is an empty list", "send at least one text", "input")
    for i, text in enumerate(texts):
        if not text:
            raise bad(f"input[{i}] is an empty string", "send text in every input", "input")
    return texts


def parse(body: object, limit: int) -> EmbeddingsRequest:
    """A `POST /v1/embeddings` body, each field checked; at most `limit` texts (--max-client-batch-size)."""
    if not isinstance(body, dict):
        raise bad(f"the body is a JSON {type(body).__name__}", 'send {"model": "...", "input": "text"}', "body")
    unknown = sorted(set(body) - set(FIELDS))
    if unknown:
        raise bad(
            f"unrecognized field {unknown[0]!r}",
            f"send only {', '.join(FIELDS)}",
            unknown[0],
        )
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad(
            f"model is {_shown(model)}" if "model" in body else "the body names no model",
            "send the name of a served embed model (GET /v1/models)",
            "model",
        )
    if "input" not in body:
        raise bad("the body has no input", 'send "input": "text" or a list of texts', "input")
    texts = _texts(body["input"])
    cap_texts(len(texts), limit, "input holds", status=400, loc=["body", "input"])
    encoding = body.get("encoding_format")
    if encoding is None:
        encoding = "float"
    if encoding not in FORMATS:
        raise bad(
            f"encoding_format is {_shown(encoding)}",
            f"send one of {', '.join(map(repr, FORMATS))}, or leave it out ('float')",
            "encoding_format",
        )
    dimensions = body.get("dimensions")
    if dimensions is not None and (type(dimensions) is not int or dimensions < 1):
        raise bad(
            f"dimensions is {_shown(dimensions)}", "send a whole number of at least 1, or leave it out", "dimensions"
        )
    return EmbeddingsRequest(model, texts, encoding, dimensions)


def check_dimensions(asked: int | None, dim: int | None, model: str) -> None:
    """`dimensions` is taken where it is the model's own size (`dim`; None where not known yet): the vectors are the
    model's, never cut to fewer dimensions (an ERNIE's vector is not trained to be read in part)."""
    if asked is not None and dim is not None and asked != dim:
        raise bad(
            f"dimensions is {asked}, and {model} answers vectors of {dim} dimensions, which it does not shorten",
            f"send dimensions {dim}, or leave it out",
            "dimensions",
        )


def encode(vector: np.ndarray, encoding: str) -> list[float] | str:
    if encoding == "base64":
        return base64.b64encode(np.ascontiguousarray(vector, dtype="<f4").tobytes()).decode("ascii")
    return vector.tolist()


def answer(request: EmbeddingsRequest, vectors: np.ndarray, lengths: np.ndarray) -> dict:
    """OpenAI's embeddings answer of unit `vectors` [texts, dim]; `lengths`: each text's tokens as the model read it."""
    tokens = int(np.asarray(lengths).sum())
    return {
        "object": "list",
        "data": [
            {"object": "embedding", "index": i, "embedding": encode(vector, request.encoding_format)}
            for i, vector in enumerate(vectors)
        ],
        "model": request.model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def model_object(model: ServedModel, created: int) -> dict:
    """One model as OpenAI's list of models shows it; `created`: when its serving config was written (Unix s)."""
    return {"id": model.name, "object": "model", "created": created, "owned_by": OWNER}


def not_found(name: str, served: list[str]) -> GatewayError:
    known = ", ".join(served) or "(none: build one first)"
    return GatewayError(
        404, "not_found", f"no model {name!r} is served here", fix=f"send one of: {known}", loc=["body", "model"]
    )
