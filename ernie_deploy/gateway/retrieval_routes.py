"""What the retrieval routes answer once the gateway has found the model and read the body (gateway.app): TEI's
embed, similarity and rerank (bodies and answers: gateway.retrieval) and OpenAI's embeddings and models
(gateway.openai), over the gateway's Triton connection, models, settings and metrics.

Each asks Triton once, for the texts of the request as they are, and refuses the request where the model had to cut
a text unless the request allowed it (TEI's `truncate`; OpenAI's embeddings never do): the model's own `truncated`
answer says so, so no text is tokenized twice."""

from __future__ import annotations

import asyncio
import time

import numpy as np
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ernie_deploy.gateway import openai, retrieval
from ernie_deploy.gateway.errors import openai_response
from ernie_deploy.gateway.models import ServedModel
from ernie_deploy.gateway.parameters import KindJson


class RetrievalRoutes:
    """The retrieval routes of one gateway (`gateway`: its `triton`, `models`, `settings` and `metrics`, read when
    a request comes, as they are then); `kind_json`: the gateway's table of the kinds' JSON (gateway.app.KIND_JSON),
    whose embed entry makes the vectors."""

    def __init__(self, gateway, kind_json: dict[str, KindJson]):
        self.gateway = gateway
        self.kind_json = kind_json

    @property
    def limit(self) -> int:
        return self.gateway.settings.max_client_batch_size

    def _vectors(self, model: ServedModel, answers: dict, normalize: bool) -> np.ndarray:
        made = self.kind_json[model.record.kind].hugging_face(answers, model.record, {"normalize": normalize})
        return np.asarray(made, dtype=np.float32)

    # -- TEI ------------------------------------------------------------------------------------------------------
    async def embed(self, model: ServedModel, body: object) -> Response:
        asked = retrieval.embed(body, self.limit)
        answers = await self.gateway.triton.infer(model, asked.texts)
        if not asked.truncate:
            limit = model.record.max_seq_len
            retrieval.refuse_truncated(answers, model, lambda i: f"inputs[{i}]", retrieval.truncate_fix(limit))
        return JSONResponse(self._vectors(model, answers, asked.normalize).tolist())

    async def similarity(self, model: ServedModel, body: object) -> Response:
        asked = retrieval.similarity(body, self.limit)
        answers = await self.gateway.triton.infer(model, asked.texts)
        if not asked.truncate:
            retrieval.refuse_truncated(
                answers,
                model,
                lambda i: "inputs.source_sentence" if i == 0 else f"inputs.sentences[{i - 1}]",
                "send parameters.truncate: true to read its head, or shorten it",
            )
        return JSONResponse(retrieval.cosines(self._vectors(model, answers, False)))

    async def rerank(self, model: ServedModel, body: object) -> Response:
        asked = retrieval.rerank(body, self.limit)
        # The logit (TEI's raw score) is computed and sent only for a request that asks it.
        answers = await self.gateway.triton.infer(
            model, [(asked.query, text) for text in asked.texts], ("logits",) if asked.raw_scores else ()
        )
        if not asked.truncate:
            retrieval.refuse_truncated(
                answers,
                model,
                lambda i: f"query with texts[{i}]",
                f"send truncate: true to read the pair's first {model.record.max_seq_len} tokens, or shorten it",
            )
        return JSONResponse(retrieval.ranks(answers["logits" if asked.raw_scores else "score"], asked))

    # -- OpenAI ---------------------------------------------------------------------------------------------------
    async def openai_embeddings(self, body: object) -> Response:
        asked = openai.parse(body, self.limit)
        models = self.gateway.models
        model = await models.get(asked.model)
        if model is None:
            raise openai.not_found(asked.model, list(models.models))
        if model.record.kind != retrieval.EMBED:
            embedders = [m.name for m in models.models.values() if m.record.kind == retrieval.EMBED]
            raise openai.bad(
                f"{model.name} is a {model.record.task} model, not an embedding (embed) model",
                f"send one of: {', '.join(embedders) or '(none: build an embed model first)'}",
                "model",
            )
        openai.check_dimensions(asked.dimensions, model.record.dim, model.name)
        answers = await self.gateway.triton.infer(model, asked.texts)
        retrieval.refuse_truncated(
            answers,
            model,
            lambda i: f"input[{i}]",
            f"shorten it, or embed its first {model.record.max_seq_len} tokens with POST /hf/{model.name}/embed and "
            "truncate: true",
            status=400,
            loc=["body", "input"],
        )
        vectors = self._vectors(model, answers, True)
        openai.check_dimensions(asked.dimensions, vectors.shape[-1], model.name)
        return JSONResponse(openai.answer(asked, vectors, answers["lengths"]))

    async def openai_models(self, request: Request) -> Response:
        """OpenAI's list of models: every served model."""
        t0 = time.perf_counter()
        models = list((await self.gateway.models.refreshed()).values())
        created = await asyncio.to_thread(self._created, [model.name for model in models])
        body = {"object": "list", "data": [openai.model_object(m, created[m.name]) for m in models]}
        self.gateway.metrics.observe("/v1/models", 200, time.perf_counter() - t0)
        return JSONResponse(body)

    async def openai_model(self, request: Request) -> Response:
        """OpenAI's one model, or its 404."""
        t0 = time.perf_counter()
        name = request.path_params["model"]
        model = await self.gateway.models.get(name)
        if model is None:
            response = openai_response(openai.not_found(name, list(self.gateway.models.models)))
        else:
            created = await asyncio.to_thread(self._created, [name])
            response = JSONResponse(openai.model_object(model, created[name]))
        error_type = None if model else "not_found"
        self.gateway.metrics.observe("/v1/models/{model}", response.status_code, time.perf_counter() - t0, error_type)
        return response

    def _created(self, names: list[str]) -> dict[str, int]:
        """When each model's config was last written (a build, or a rollout), in Unix seconds; 0 where it is gone."""
        out = {}
        for name in names:
            try:
                out[name] = int((self.gateway.settings.repository / name / "config.pbtxt").stat().st_mtime)
            except OSError:
                out[name] = 0
        return out
