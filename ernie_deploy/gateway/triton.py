"""The gateway's side of gRPC: one asyncio tritonclient per process (client.grpc_client(aio=True)), whose channel
carries every request as its own HTTP/2 stream, so concurrent requests share one connection instead of opening one
each; a request's texts go out in the model's wire (core.io) and its answers come back as the task's own tensors
(client.wire.native_answers).

A request of more texts than the model's max_batch_size goes out as several Triton requests at once; the request's
character limit (max_request_chars), which Triton checks per Triton request, is then checked here for the whole
request, in the tokenizer's own words. One that fits one Triton request is merged with the concurrent requests of
its model into one call (gateway.coalesce, `--coalesce-ms`)."""

from __future__ import annotations

import asyncio

import numpy as np

from ernie_deploy.client.grpc_client import grpc_client, input_columns, wire_inputs
from ernie_deploy.client.wire import native_answers
from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.tls import Tls
from ernie_deploy.gateway.coalesce import Coalescer
from ernie_deploy.gateway.errors import GatewayError
from ernie_deploy.gateway.models import ServedModel

# The Triton statuses that say the server or the model is not there to answer now (503: ask again later).
UNAVAILABLE = {"StatusCode.UNAVAILABLE", "StatusCode.NOT_FOUND", "StatusCode.CANCELLED"}
# The words of a Triton refusal that name a request limit (serving.limits): a body over what the model takes.
LIMIT_WORDS = ("max_text_chars", "max_request_chars")
# Where str() of an ErnieDeployError (core.errors) puts the fix: a step's refusal, as Triton passes it on, holds it so.
STEP_FIX = "\n  fix: "


class Triton:
    """One tritonserver's gRPC endpoint, reached with one asyncio client (made on the serving loop by `open`)."""

    def __init__(
        self, url: str, tls: Tls | None = None, timeout_s: float = 60.0, coalesce_s: float = 0.0, metrics=None
    ):
        self.url = url
        self.tls = tls
        self.timeout_s = timeout_s
        self.client = None
        # Concurrent requests of one model merged into one call within coalesce_s seconds (0: each its own call).
        self.coalescer = Coalescer(self._infer, coalesce_s, metrics) if coalesce_s > 0 else None
        # (id of a model record, asked) -> (the record, its wire, answered specs, requested outputs): Triton._outputs.
        self._requested: dict[tuple, tuple] = {}

    def open(self) -> None:
        self.client = grpc_client(self.url, self.tls, aio=True)

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()
            self.client = None

    async def ready(self, names: list[str], timeout_s: float = 2.0) -> dict[str, bool | str]:
        """Whether the server is ready, and each model: {"server": ..., name: ...}; a problem as its text."""
        from tritonclient.utils import InferenceServerException

        try:
            server = await self.client.is_server_ready(client_timeout=timeout_s)
        except InferenceServerException as exc:
            return {"server": f"no Triton server answers at {self.url}: {exc.message()}"}
        out: dict[str, bool | str] = {"server": bool(server)}
        for name in names:
            try:
                out[name] = bool(await self.client.is_model_ready(name, client_timeout=timeout_s))
            except InferenceServerException as exc:
                out[name] = exc.message() or str(exc)
        return out

    async def infer(self, model: ServedModel, items: list, asked=()) -> dict[str, np.ndarray]:
        """`items` (texts, or (text, text_pair) pairs) answered by `model`, as the task's own outputs; `asked`: the
        answers computed on request only (core.tasks.ON_REQUEST) the request needs, which Triton computes only then."""
        size = model.max_batch_size if model.max_batch_size > 0 else len(items)
        if len(items) > size and model.limits is not None:
            task = model.record.task_spec
            # The texts only, as the model counts them: an option beside them (a schema) is not one.
            texts = input_columns(task, items)[: len(task.inputs)]
            total = sum(len(text) for column in texts for text in column)
            problem = model.limits.request_problem(total, len(items))
            if problem:
                raise GatewayError(413, "validation", problem, fix=model.limits.request_fix)
        if len(items) <= size:
            if self.coalescer is not None and size > 1:
                return await self.coalescer.infer(model, items, tuple(asked))
            # One Triton request: awaited as it is, without gather's task and the concatenation of one part (0.033 ms
            # of a lone request's wall time: docs/gateway-profile.json, benchmarks/gateway_profile.py).
            return await self._infer(model, items, asked)
        parts = await asyncio.gather(
            *(self._infer(model, items[i : i + size], asked) for i in range(0, len(items), size))
        )
        return {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}

    def _outputs(self, model: ServedModel, asked: tuple):
        """The model's wire, the answers a request of `model` reads and the requested outputs that name them, made
        once per model record and `asked` (what a rollout changes comes with a new record) instead of per request:
        the record makes its wire anew each time it is asked (16 us a request under cProfile, and its read specs 18
        us: docs/gateway-profile.json)."""
        key = (id(model.record), tuple(asked))
        held = self._requested.get(key)
        if held is None or held[0] is not model.record:
            import tritonclient.grpc as grpcclient

            wire = model.record.wire
            answered = wire.read_specs(asked)
            held = (model.record, wire, answered, [grpcclient.InferRequestedOutput(o.name) for o in answered])
            if len(self._requested) >= 1024:  # records left behind by rollouts: start again rather than grow
                self._requested.clear()
            self._requested[key] = held
        return held[1:]

    async def _infer(self, model: ServedModel, items: list, asked=()) -> dict[str, np.ndarray]:
        from tritonclient.utils import InferenceServerException

        record = model.record
        wire, answered, outputs = self._outputs(model, asked)
        columns = input_columns(record.task_spec, items)
        tensors = wire_inputs(wire, columns)
        try:
            result = await self.client.infer(record.name, tensors, outputs=outputs, client_timeout=self.timeout_s)
        except InferenceServerException as exc:
            raise refusal(record.name, self.url, exc) from None
        try:
            answers = {o.name: result.as_numpy(o.name) for o in answered}
            return native_answers(wire, answers, columns[0], record.labels)
        except ErnieDeployError as exc:
            raise GatewayError(
                424, "backend", exc.problem, fix=exc.fix or "check the served model's record (`ernie-deploy check`)"
            ) from None


def refusal(model: str, url: str, exc) -> GatewayError:
    """Triton's refusal of a request as the gateway answers it: the request's fault (4xx, Triton's own message), the
    model or server not there now (503), or a failure of the model (424, TEI's backend error)."""
    status, text = str(exc.status()), exc.message() or str(exc)
    if status == "StatusCode.INVALID_ARGUMENT":
        over = any(word in text for word in LIMIT_WORDS)
        problem, _, fix = text.partition(STEP_FIX)  # sent on one line, as every message of the gateway
        return GatewayError(
            413 if over else 422, "validation", problem, fix=fix or "correct the request as the message says"
        )
    if status in UNAVAILABLE:
        return GatewayError(
            503,
            "unhealthy",
            f"model {model!r} is not ready at {url} ({text})",
            fix="wait for the server to load it, or check the server's log",
            headers={"Retry-After": "1"},
        )
    if status == "StatusCode.DEADLINE_EXCEEDED":
        return GatewayError(
            504, "backend", f"model {model!r} did not answer in time ({text})", fix="send fewer or shorter texts"
        )
    return GatewayError(
        424, "backend", f"model {model!r} failed: {text} ({status.split('.')[-1]})", fix="check the server's log"
    )
