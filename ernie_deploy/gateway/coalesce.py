"""Concurrent requests to one model sent to Triton as one gRPC call (`--coalesce-ms`) and its answers split back.

A request that fits one Triton request goes out at once when no other call to its model is in flight: a lone
request never waits. While one is in flight, requests that arrive join the model's pending call, which goes out
when `window_s` has passed since its first part came, when it holds the model's max_batch_size texts, or when the
model's calls in flight have all come back (the server has nothing of this model left to work on, so waiting longer
only adds latency). Each part's answers are its rows of the merged answers, in the order its texts were sent.

Why merging pays on a shared host: each gRPC call costs the gateway's asyncio client and the server a fixed share of
CPU beside the model (0.14 ms of client CPU a call: docs/gateway-profile.json), and at concurrency 8 that CPU is what
bounds the throughput on two cores (docs/BENCHMARKS.md, "HTTP gateway"); a merged call pays it once for its parts.

A bad request fails alone, with the error it gets when sent alone: when Triton refuses a merged call, or the call
fails otherwise, each of its parts is sent again on its own and gets its own answer or its own refusal. That was
chosen over checking the parts before merging because the checks (UTF-8, empty and overlong texts, the tokenizer's
limits, each kind's options) are the model's own, made inside Triton by the serving steps: repeating them here would
give two sources of the same messages, which drift. The merge is held to what one request of the model may hold (its
max_batch_size texts and its max_request_chars characters), so a merged call of good parts is never refused for its
size; a refusal costs its good neighbours one more call each. A merged call that timed out (504) or found the model
not there (503) is not sent again: its parts get that answer, as each would have alone.

Parts merge only with parts of the same model record (a rollout's new record starts a group of its own), the same
answers asked (`asked`) and the same item shape (plain texts, or tuples with the same options: an extraction
model's schema), so a merged call asks Triton exactly what each part would have."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import numpy as np

from ernie_deploy.client.grpc_client import input_columns
from ernie_deploy.gateway.errors import GatewayError
from ernie_deploy.gateway.models import ServedModel

Send = Callable[[ServedModel, list, tuple], Awaitable[dict[str, np.ndarray]]]

# The statuses of a merged call's failure that each part would have met alone: the model or server not there now
# (503), and no answer within --timeout (504, which a second call would only wait for again).
SHARED_FAILURES = (503, 504)


@dataclass(eq=False)
class _Part:
    """One request's items waiting in a pending call, and the future its answers are set on."""

    items: list
    chars: int
    future: asyncio.Future


@dataclass(eq=False)
class _Group:
    """The calls to one model record, for one `asked` and item shape: how many are in flight, and the pending one."""

    model: ServedModel
    asked: tuple
    in_flight: int = 0
    pending: list[_Part] = field(default_factory=list)
    texts: int = 0  # items pending
    chars: int = 0  # their characters, as the model's max_request_chars counts them
    timer: asyncio.TimerHandle | None = None

    @property
    def idle(self) -> bool:
        return self.in_flight == 0 and not self.pending


class Coalescer:
    """Merges concurrent requests of one model into one call of `send(model, items, asked)` (Triton._infer) within
    `window_s` seconds, at most the model's max_batch_size texts a call."""

    def __init__(self, send: Send, window_s: float, metrics=None):
        self.send = send
        self.window_s = window_s
        self.metrics = metrics  # gateway.metrics.Metrics: merged calls counted (`merged`, `resent`), when given
        self._groups: dict[tuple, _Group] = {}
        self._tasks: set[asyncio.Task] = set()  # the merged calls running (held: the loop keeps only weak references)

    async def infer(self, model: ServedModel, items: list, asked: tuple = ()) -> dict[str, np.ndarray]:
        """`items` (at most the model's max_batch_size) answered by `model`, merged with the requests of the same
        model that come within the window while another call to it is in flight."""
        key = (id(model.record), asked, _shape(model, items))
        group = self._groups.get(key)
        if group is None or group.model.record is not model.record:
            group = self._groups[key] = _Group(model, asked)
        if group.idle:
            # Nothing of this model in flight: sent at once, awaited as it is (no future, no task).
            group.in_flight += 1
            try:
                return await self.send(model, items, asked)
            finally:
                group.in_flight -= 1
                self._after_call(key, group)
        part = _Part(items, _chars(model, items), asyncio.get_running_loop().create_future())
        if group.pending and not _fits(group, part):
            self._flush(key, group)
            self._groups.setdefault(key, group)  # kept, should every part it held have been cancelled
        group.pending.append(part)
        group.texts += len(items)
        group.chars += part.chars
        if group.texts >= model.max_batch_size:
            self._flush(key, group)
        elif group.timer is None:
            group.timer = asyncio.get_running_loop().call_later(self.window_s, self._flush, key, group)
        return await part.future

    def _flush(self, key: tuple, group: _Group) -> None:
        """The pending call sent now, as a task of its own."""
        if group.timer is not None:
            group.timer.cancel()
            group.timer = None
        parts = [part for part in group.pending if not part.future.done()]  # a cancelled request is not sent
        group.pending, group.texts, group.chars = [], 0, 0
        if not parts:
            self._after_call(key, group)
            return
        group.in_flight += 1
        task = asyncio.get_running_loop().create_task(self._call(key, group, parts))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _call(self, key: tuple, group: _Group, parts: list[_Part]) -> None:
        try:
            if len(parts) == 1:
                await _settle(parts[0], self.send(group.model, parts[0].items, group.asked))
                return
            items = [item for part in parts for item in part.items]
            if self.metrics is not None:
                self.metrics.merged(len(parts))
            try:
                answers = await self.send(group.model, items, group.asked)
            except GatewayError as exc:
                if exc.status in SHARED_FAILURES:
                    for part in parts:
                        _fail(part, _copy(exc))
                    return
                # Refused or failed as a whole: each part on its own, so that only a bad one gets its error.
                if self.metrics is not None:
                    self.metrics.resent()
                await asyncio.gather(
                    *(_settle(part, self.send(group.model, part.items, group.asked)) for part in parts)
                )
                return
            except Exception as exc:  # not Triton's answer (the gateway's own failure): every part hears it
                for part in parts:
                    _fail(part, exc)
                return
            start = 0
            for part in parts:
                end = start + len(part.items)
                if not part.future.done():
                    part.future.set_result({name: value[start:end] for name, value in answers.items()})
                start = end
        except asyncio.CancelledError:  # the gateway closing: the parts waiting are cancelled too
            for part in parts:
                part.future.cancel()
            raise
        finally:
            group.in_flight -= 1
            self._after_call(key, group)

    def _after_call(self, key: tuple, group: _Group) -> None:
        """A call came back: the pending one goes out if nothing else of the model is in flight, and an idle group
        is dropped (a rollout's old record leaves none behind)."""
        if group.in_flight == 0 and group.pending:
            self._flush(key, group)
        elif group.idle and self._groups.get(key) is group:
            del self._groups[key]


async def _settle(part: _Part, call: Awaitable[dict[str, np.ndarray]]) -> None:
    """`call`'s answers or its error set on `part`."""
    try:
        answers = await call
    except Exception as exc:
        _fail(part, exc)
    else:
        if not part.future.done():
            part.future.set_result(answers)


def _fail(part: _Part, exc: BaseException) -> None:
    if not part.future.done():
        part.future.set_exception(exc)


def _copy(exc: GatewayError) -> GatewayError:
    """The same answer as its own exception: one raised in several requests' tasks would share its traceback."""
    return GatewayError(
        exc.status, exc.error_type, exc.problem, fix=exc.fix, loc=exc.loc, kind=exc.kind, headers=dict(exc.headers)
    )


def _shape(model: ServedModel, items: list) -> tuple | None:
    """What a merged call's items must share: None for plain texts, else a tuple's length and its options (the values
    after the model's text inputs: an extraction model's schema, the same for every text of a request)."""
    first = items[0] if items else None
    if not isinstance(first, tuple | list):
        return None
    return (len(first), *first[len(model.record.task_spec.inputs) :])


def _chars(model: ServedModel, items: list) -> int:
    """The characters of `items` as the model's max_request_chars counts them (its texts, not its options)."""
    if model.record.max_request_chars is None:
        return 0
    task = model.record.task_spec
    return sum(len(text) for column in input_columns(task, items)[: len(task.inputs)] for text in column)


def _fits(group: _Group, part: _Part) -> bool:
    """Whether `part` may join the pending call: it stays within one request of the model."""
    model = group.model
    if group.texts + len(part.items) > model.max_batch_size:
        return False
    limit = model.record.max_request_chars
    return limit is None or group.chars + part.chars <= limit
