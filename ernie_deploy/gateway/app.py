"""The gateway's ASGI app (Starlette) and how it is served (uvicorn, one worker): the routes of docs/GATEWAY.md.

Per request, in this order: an inference request beyond --max-concurrent-requests gets 503 with Retry-After, never
queued (as TEI sheds load: a client backs off instead of waiting behind a queue it cannot see); the model is looked
up (the repository is read again for a name not known); a body past --max-body-bytes is refused with 413, read and
thrown away first up to a bound (gateway.bodies), as is the body of a request refused before it was read (404,
503); then the JSON, the texts, Triton's answer and the kind's JSON (kinds/<kind>/gateway.py); TEI's /tokenize is
answered from the model's own tokenizer instead of Triton (gateway.tokenize). Any refusal is answered in the error
shape of the route's contract (gateway.errors), and an unexpected failure is logged and answered as a 500 in that
shape: the gateway itself keeps serving."""

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
from ernie_deploy.gateway import bodies
from ernie_deploy.gateway.defaults import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_CONCURRENT, DEFAULT_PORT
from ernie_deploy.gateway.errors import (
    GatewayError,
    hugging_face_response,
    simple_serving_response,
)
from ernie_deploy.gateway.metrics import Metrics
from ernie_deploy.gateway.models import ModelTable, ServedModel, reads_schema
from ernie_deploy.gateway.parameters import KindJson
from ernie_deploy.gateway.tokenize import Tokenizers
from ernie_deploy.gateway.triton import Triton
from ernie_deploy.kinds import layer_table
from ernie_deploy.kinds.multi_label.gateway import JSON as MULTI_LABEL
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
        "multi_label": MULTI_LABEL,
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
}


@dataclass(frozen=True)
class GatewaySettings:
    repository: Path = Path("models")
    grpc_url: str = DEFAULT_GRPC_URL
    tls: Tls | None = None  # how to reach a tritonserver that serves gRPC over TLS
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_concurrent_requests: int = DEFAULT_MAX_CONCURRENT
    timeout_s: float = 60.0  # per Triton request


class Gateway:
    """One gateway: the served models, the Triton connection, the metrics and the count of requests in flight."""

    def __init__(self, settings: GatewaySettings):

        if settings.max_body_bytes < 1 or settings.max_concurrent_requests < 1:
            raise BadOptionsError(
                f"--max-body-bytes {settings.max_body_bytes} and --max-concurrent-requests "
                f"{settings.max_concurrent_requests} must both be at least 1",
                "pass positive numbers, or leave them out for the defaults",
            )
        self.settings = settings
        self.models = ModelTable(settings.repository)
        self.tokenizers = Tokenizers(settings.repository)
        self.triton = Triton(settings.grpc_url, settings.tls, settings.timeout_s)
        self.metrics = Metrics()
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
        answers = await self.triton.infer(model, bodies.with_schema(items, parameters, model.record))
        return JSONResponse({"result": KIND_JSON[model.record.kind].simple_serving(answers, model.record, parameters)})

    async def _hugging_face(self, request: Request, route: str) -> Response:
        model, (items, single, parameters) = await self._items(request, bodies.hugging_face, route)
        kind = model.record.kind
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
        return JSONResponse(await self.tokenizers.answer(model, bodies.parse_json(body)))

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


@dataclass(frozen=True)
class Https:
    """The gateway's own HTTPS: its certificate and key, and with `ca` only clients presenting a certificate signed
    by that CA are served (mutual TLS)."""

    cert: Path
    key: Path
    ca: Path | None = None

    def __post_init__(self) -> None:
        import ssl

        for option, path in (("--http-tls-cert", self.cert), ("--http-tls-key", self.key), ("--http-tls-ca", self.ca)):
            if path is not None and not Path(path).is_file():
                raise BadOptionsError(f"{option} {path}: no such file", "pass the path of an existing PEM file")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            context.load_cert_chain(str(self.cert), str(self.key), password=lambda: b"")
            if self.ca is not None:
                context.load_verify_locations(cafile=str(self.ca))
        except ssl.SSLError as exc:
            raise BadOptionsError(
                f"--http-tls-cert {self.cert}, --http-tls-key {self.key}"
                + (f", --http-tls-ca {self.ca}" if self.ca else "")
                + f" cannot be used: {exc.reason or exc}",
                "pass the gateway's PEM certificate, its own unencrypted key, and a PEM CA certificate",
            ) from None

    def uvicorn(self) -> dict:
        import ssl

        out = {"ssl_certfile": str(self.cert), "ssl_keyfile": str(self.key)}
        if self.ca is not None:
            out |= {"ssl_ca_certs": str(self.ca), "ssl_cert_reqs": ssl.CERT_REQUIRED}
        return out


def serve(
    settings: GatewaySettings,
    *,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    https: Https | None = None,
    log_level: str = "info",
) -> None:
    """Serve the gateway in the foreground (uvicorn, one worker) until SIGTERM or Ctrl-C, which finish the requests
    in flight and close the Triton connection."""
    import uvicorn

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    gateway = Gateway(settings)
    scheme = "https" if https else "http"
    shown = f"[{host}]" if ":" in host else host
    print(
        f"ernie-deploy gateway: {len(gateway.models.models)} models of {settings.repository} "
        f"({', '.join(gateway.models.models) or 'none yet'}) at {scheme}://{shown}:{port}, readiness "
        f"{scheme}://{shown}:{port}/ready, Triton gRPC at {settings.grpc_url}",
        flush=True,
    )
    config = uvicorn.Config(
        gateway.app(),
        host=host,
        port=port,
        workers=1,
        log_level=log_level,
        access_log=False,  # a line per request costs what the gateway is measured by; /metrics counts them
        lifespan="on",
        timeout_graceful_shutdown=30,
        **(https.uvicorn() if https else {}),
    )
    uvicorn.Server(config).run()
