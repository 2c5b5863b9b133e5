"""The gateway's ASGI app (Starlette; served by gateway.listen): the routes of docs/GATEWAY.md.

Per request, in this order: an inference request beyond --max-concurrent-requests gets 503 with Retry-After, never
queued (as TEI sheds load: a client backs off instead of waiting behind a queue it cannot see); the model is looked
up (the repository is read again for a name not known); a body past --max-body-bytes is refused with 413, read and
thrown away first up to a bound (gateway.bodies), as is the body of a request refused before it was read (404,
503); then the JSON, the texts, Triton's answer and the kind's JSON (kinds/<kind>/gateway.py); TEI's /tokenize is
answered from the model's own tokenizer instead of Triton (gateway.tokenize); TEI's embed, similarity and rerank
(gateway.retrieval) and OpenAI's embeddings (gateway.openai) read their own bodies. Every inference route holds a
request to --max-client-batch-size texts. Any refusal is answered in the error shape of the route's contract
(gateway.errors), and an unexpected failure is logged and answered as a 500 in that shape: the gateway itself keeps
serving."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ernie_deploy.core.endpoints import DEFAULT_GRPC_URL
from ernie_deploy.core.errors import BadOptionsError, BadRequest
from ernie_deploy.core.tls import Tls
from ernie_deploy.gateway import bodies, retrieval
from ernie_deploy.gateway.defaults import (
    DEFAULT_COALESCE_MS,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_CLIENT_BATCH_SIZE,
    DEFAULT_MAX_CONCURRENT,
    MAX_COALESCE_MS,
)
from ernie_deploy.gateway.errors import (
    GatewayError,
    hugging_face_response,
    openai_response,
    simple_serving_response,
)
from ernie_deploy.gateway.metrics import Metrics
from ernie_deploy.gateway.models import ModelTable, ServedModel, reads_schema
from ernie_deploy.gateway.parameters import KindJson
from ernie_deploy.gateway.retrieval_routes import RetrievalRoutes
from ernie_deploy.gateway.tokenize import Tokenizers
from ernie_deploy.gateway.triton import Triton
from ernie_deploy.kinds import layer_table
from ernie_deploy.kinds.embed.gateway import JSON as EMBED
from ernie_deploy.kinds.multi_label.gateway import JSON as MULTI_LABEL
from ernie_deploy.kinds.rerank.gateway import JSON as RERANK
from ernie_deploy.kinds.sequence.gateway import JSON as SEQUENCE
from ernie_deploy.kinds.token.gateway import JSON as TOKEN
from ernie_deploy.kinds.uie.gateway import JSON as UIE

log = logging.getLogger("ernie_deploy.gateway")

# The gateway's table of the kinds: how each kind's answers become each contract's JSON (kinds/<kind>/gateway.py), by
# the kind's name. A kind is one import above and one line here.
KIND_JSON: dict[str, KindJson] = layer_table(
    "gateway",
    __name__,
    {
        "embed": EMBED,
        "multi_label": MULTI_LABEL,
        "rerank": RERANK,
        "sequence": SEQUENCE,
        "token": TOKEN,
        "uie": UIE,
    },
)


ROUTES = {
    "simple_serving": "/models/{model}",
    "taskflow": "/taskflow/{model}",
    "hugging_face": "/hf/{model}",
    "tei_predict": "/hf/{model}/predict",
    "tei_tokenize": "/hf/{model}/tokenize",
    "tei_embed": "/hf/{model}/embed",
    "tei_similarity": "/hf/{model}/similarity",
    "tei_rerank": "/hf/{model}/rerank",
    "openai_embeddings": "/v1/embeddings",
}


@dataclass(frozen=True)
class GatewaySettings:
    repository: Path = Path("models")
    grpc_url: str = DEFAULT_GRPC_URL
    tls: Tls | None = None  # how to reach a tritonserver that serves gRPC over TLS
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_concurrent_requests: int = DEFAULT_MAX_CONCURRENT
    max_client_batch_size: int = DEFAULT_MAX_CLIENT_BATCH_SIZE  # texts per inference request
    timeout_s: float = 60.0  # per Triton request
    coalesce_ms: float = DEFAULT_COALESCE_MS  # concurrent requests of a model merged into one call (0: never)


class Gateway:
    """One gateway: the served models, the Triton connection, the metrics and the count of requests in flight."""

    def __init__(self, settings: GatewaySettings):

        bounds = {
            "--max-body-bytes": settings.max_body_bytes,
            "--max-concurrent-requests": settings.max_concurrent_requests,
            "--max-client-batch-size": settings.max_client_batch_size,
        }
        if min(bounds.values()) < 1:
            raise BadOptionsError(
                ", ".join(f"{flag} {value}" for flag, value in bounds.items()) + ": each must be at least 1",
                "pass positive numbers, or leave them out for the defaults",
            )
        if not 0 <= settings.coalesce_ms <= MAX_COALESCE_MS:
            raise BadOptionsError(
                f"--coalesce-ms {settings.coalesce_ms}: the window must be 0 (off) to {MAX_COALESCE_MS:g} ms",
                f"pass a window from 0 to {MAX_COALESCE_MS:g}, or leave it out for the default "
                f"({DEFAULT_COALESCE_MS:g} ms)",
            )
        self.settings = settings
        self.models = ModelTable(settings.repository)
        self.tokenizers = Tokenizers(settings.repository)
        self.metrics = Metrics()
        self.triton = Triton(
            settings.grpc_url, settings.tls, settings.timeout_s, settings.coalesce_ms / 1000, self.metrics
        )
        self.retrieval = RetrievalRoutes(self, KIND_JSON)
        self.in_flight = 0
        self.metrics.count_in_flight(lambda: self.in_flight)

    # -- the app --------------------------------------------------------------------------------------------------
    def app(self) -> Starlette:
        @contextlib.asynccontextmanager
        async def lifespan(app):
            self.triton.open()  # on the serving loop: the asyncio channel belongs to it
            try:
                yield
            finally:
                await self.triton.close()

        routes = [
            Route(ROUTES["simple_serving"], self.simple_serving, methods=["POST"]),
            Route(ROUTES["taskflow"], self.taskflow, methods=["POST"]),
            Route(ROUTES["hugging_face"], self.hugging_face, methods=["POST"]),
            Route(ROUTES["tei_predict"], self.tei_predict, methods=["POST"]),
            Route(ROUTES["tei_tokenize"], self.tei_tokenize, methods=["POST"]),
            Route(ROUTES["tei_embed"], self.tei_embed, methods=["POST"]),
            Route(ROUTES["tei_similarity"], self.tei_similarity, methods=["POST"]),
            Route(ROUTES["tei_rerank"], self.tei_rerank, methods=["POST"]),
            Route(ROUTES["openai_embeddings"], self.openai_embeddings, methods=["POST"]),
            Route("/v1/models", self.retrieval.openai_models, methods=["GET"]),
            Route("/v1/models/{model}", self.retrieval.openai_model, methods=["GET"]),
            Route("/health", self.health, methods=["GET"]),
            Route("/ready", self.ready, methods=["GET"]),
            Route("/info", self.info, methods=["GET"]),
            Route("/models", self.info, methods=["GET"]),
            Route("/metrics", self.prometheus, methods=["GET"]),
        ]
        return Starlette(routes=routes, lifespan=lifespan)

    # -- inference routes -----------------------------------------------------------------------------------------
    async def simple_serving(self, request: Request) -> Response:
        return await self._inference(request, "simple_serving", simple_serving_response, self._simple_serving)

    async def taskflow(self, request: Request) -> Response:
        return await self._inference(request, "taskflow", simple_serving_response, self._simple_serving)

    async def hugging_face(self, request: Request) -> Response:
        return await self._inference(request, "hugging_face", hugging_face_response, self._hugging_face)

    async def tei_predict(self, request: Request) -> Response:
        return await self._inference(request, "tei_predict", hugging_face_response, self._hugging_face)

    async def tei_tokenize(self, request: Request) -> Response:
        # Counted and bounded as an inference request: tokenizing a request's most characters is seconds of work.
        return await self._inference(request, "tei_tokenize", hugging_face_response, self._tokenize)

    async def tei_embed(self, request: Request) -> Response:
        return await self._inference(request, "tei_embed", hugging_face_response, self._tei_embed)

    async def tei_similarity(self, request: Request) -> Response:
        return await self._inference(request, "tei_similarity", hugging_face_response, self._tei_similarity)

    async def tei_rerank(self, request: Request) -> Response:
        return await self._inference(request, "tei_rerank", hugging_face_response, self._tei_rerank)

    async def openai_embeddings(self, request: Request) -> Response:
        return await self._inference(request, "openai_embeddings", openai_response, self._openai_embeddings)

    async def _inference(
        self,
        request: Request,
        route: str,
        render: Callable[[GatewayError], Response],
        answer: Callable[[Request, str], Awaitable[Response]],
    ) -> Response:
        t0 = time.perf_counter()
        error_type = None
        try:
            if self.in_flight >= self.settings.max_concurrent_requests:
                raise GatewayError(
                    503,
                    "overloaded",
                    f"the gateway is answering {self.in_flight} requests, its limit (--max-concurrent-requests)",
                    fix="retry after the Retry-After seconds, or start the gateway with a larger "
                    "--max-concurrent-requests",
                    headers={"Retry-After": "1"},
                )
            self.in_flight += 1
            try:
                response = await answer(request, route)
            finally:
                self.in_flight -= 1
        except GatewayError as exc:
            await bodies.discard_unread(request, self.settings.max_body_bytes, exc)
            error_type, response = exc.error_type, render(exc)
        except BadRequest as exc:  # a parameter the kind cannot honour (kinds/<kind>/gateway.py)
            error_type, response = "validation", render(GatewayError.from_error(exc))
        except Exception:
            log.exception("%s %s failed", request.method, request.url.path)
            error_type = "backend"
            response = render(
                GatewayError(500, "backend", "the gateway failed to answer", fix="read the gateway's log, and retry")
            )
        self.metrics.observe(ROUTES[route], response.status_code, time.perf_counter() - t0, error_type)
        return response

    async def _model(self, request: Request) -> ServedModel:
        name = request.path_params["model"]
        model = await self.models.get(name)
        if model is None:
            known = ", ".join(self.models.models) or "(none: build one first)"
            raise GatewayError(
                404, "not_found", f"{self.models.repository} serves no model {name!r}", fix=f"call one of: {known}"
            )
        return model

    async def _body(self, request: Request) -> object:
        return bodies.parse_json(await bodies.read_body(request, self.settings.max_body_bytes))

    async def _items(self, request: Request, parse, route: str) -> tuple[ServedModel, object]:
        model = await self._model(request)
        if route == "taskflow" and not reads_schema(model.record):
            # SimpleServing registers a taskflow route for a Taskflow only: no other model has this one.
            raise GatewayError(
                404,
                "not_found",
                f"{model.name} is a {model.record.task} model, which reads no schema: the taskflow route serves "
                "extraction (uie) models only",
                fix=f"call POST {ROUTES['simple_serving'].format(model=model.name)} (SimpleServing's model route) "
                f"or POST {ROUTES['hugging_face'].format(model=model.name)}",
            )
        body = await bodies.read_body(request, self.settings.max_body_bytes)
        return model, parse(bodies.parse_json(body), model.record)

    async def _simple_serving(self, request: Request, route: str) -> Response:
        model, (items, parameters) = await self._items(request, bodies.simple_serving, route)
        if not items:
            raise GatewayError.invalid("data.text is an empty list", "send at least one text", ["body", "data", "text"])
        bodies.cap_texts(len(items), self.settings.max_client_batch_size, "data.text holds")
        answers = await self.triton.infer(model, bodies.with_schema(items, parameters, model.record))
        return JSONResponse({"result": KIND_JSON[model.record.kind].simple_serving(answers, model.record, parameters)})

    async def _hugging_face(self, request: Request, route: str) -> Response:
        model = await self._model(request)
        body = await self._body(request)
        kind = model.record.kind
        if kind == retrieval.EMBED:
            if route == "hugging_face":
                # What InferenceClient.feature_extraction and .sentence_similarity post to a model URL.
                if retrieval.is_similarity(body):
                    return await self.retrieval.similarity(model, body)
                return await self.retrieval.embed(model, body)
            raise GatewayError(
                424,
                "backend",
                f"{model.name} is an embedding model, and TEI's /predict answers classifiers",
                fix=f"call POST /hf/{model.name}/embed (or POST /hf/{model.name})",
            )
        items, single, parameters = bodies.hugging_face(body, model.record)
        bodies.cap_texts(len(items), self.settings.max_client_batch_size, "inputs holds")
        # Every label's scores are computed and sent only for a request whose parameters need them.
        asked = KIND_JSON[kind].asks(parameters)
        answers = await self.triton.infer(model, bodies.with_schema(items, parameters, model.record), asked)
        per_text = KIND_JSON[kind].hugging_face(answers, model.record, parameters)
        if not single:
            return JSONResponse(per_text)
        # One input: TEI's /predict answers it alone; the Hugging Face Inference API as huggingface_hub reads it.
        one = per_text[0]
        return JSONResponse([one] if route == "hugging_face" and KIND_JSON[kind].one_text_as_list else one)

    async def _tokenize(self, request: Request, route: str) -> Response:
        model = await self._model(request)
        body = await bodies.read_body(request, self.settings.max_body_bytes)
        return JSONResponse(
            await self.tokenizers.answer(model, bodies.parse_json(body), self.settings.max_client_batch_size)
        )

    # -- retrieval: TEI's embed, similarity and rerank, OpenAI's embeddings (gateway.retrieval_routes) -----------
    async def _tei_embed(self, request: Request, route: str) -> Response:
        model = await self._model(request)
        retrieval.require(model, retrieval.EMBED, ROUTES[route])
        return await self.retrieval.embed(model, await self._body(request))

    async def _tei_similarity(self, request: Request, route: str) -> Response:
        model = await self._model(request)
        retrieval.require(model, retrieval.EMBED, ROUTES[route])
        return await self.retrieval.similarity(model, await self._body(request))

    async def _tei_rerank(self, request: Request, route: str) -> Response:
        model = await self._model(request)
        retrieval.require(model, retrieval.RERANK, ROUTES[route])
        return await self.retrieval.rerank(model, await self._body(request))

    async def _openai_embeddings(self, request: Request, route: str) -> Response:
        return await self.retrieval.openai_embeddings(await self._body(request))

    # -- health, info, metrics ------------------------------------------------------------------------------------
    async def health(self, request: Request) -> Response:
        t0 = time.perf_counter()
        response = JSONResponse({"status": "live"})
        self.metrics.observe("/health", 200, time.perf_counter() - t0)
        return response

    async def ready(self, request: Request) -> Response:
        """200 when Triton is ready and so is every served model; else 503, saying what is not."""
        t0 = time.perf_counter()
        names = list(self.models.models)
        state = await self.triton.ready(names)
        ok = state.get("server") is True and all(state.get(name) is True for name in names)
        body = {
            "ready": ok,
            "server": state["server"],
            "models": {name: state.get(name, "not asked: the server is not ready") for name in names},
        }
        response = JSONResponse(body, 200 if ok else 503)
        self.metrics.observe("/ready", response.status_code, time.perf_counter() - t0, None if ok else "unhealthy")
        return response

    async def info(self, request: Request) -> Response:
        t0 = time.perf_counter()
        body = {
            "triton_url": self.settings.grpc_url,
            "triton_tls": self.settings.tls.describe() if self.settings.tls else None,
            "repository": str(self.settings.repository),
            "max_body_bytes": self.settings.max_body_bytes,
            "max_concurrent_requests": self.settings.max_concurrent_requests,
            "max_client_batch_size": self.settings.max_client_batch_size,
            "coalesce_ms": self.settings.coalesce_ms,
            "models": [
                {**model.info(), "hugging_face_task": KIND_JSON[model.record.kind].hf_task}
                for model in (await self.models.refreshed()).values()
            ],
        }
        self.metrics.observe(request.url.path, 200, time.perf_counter() - t0)
        return JSONResponse(body)

    async def prometheus(self, request: Request) -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(generate_latest(self.metrics.registry), media_type=CONTENT_TYPE_LATEST)


def create_app(settings: GatewaySettings) -> Starlette:
    """The gateway's ASGI app (serve it with any ASGI server, one worker)."""
    return Gateway(settings).app()
