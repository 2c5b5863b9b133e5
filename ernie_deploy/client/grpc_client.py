"""gRPC client for the served ensembles (tritonclient): readiness checks, batching, retries with backoff for
transient failures, and per-text errors for batches that mix good and bad texts."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

import numpy as np

from ernie_deploy.client.wire import KIND_CLIENT, native_answers
from ernie_deploy.core.endpoints import DEFAULT_GRPC_URL
from ernie_deploy.core.errors import BadOptionsError, BadRequest, FailedRequestsError, ServerNotReadyError
from ernie_deploy.core.io import wire
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.core.tasks import DEMO_MODELS, TaskSpec
from ernie_deploy.core.tls import Tls
from ernie_deploy.serving.texts import text_problem

# gRPC status codes worth another try: the server is (re)starting or unreachable, or a model instance
# failed (e.g. a python-backend stub died and `ernie-deploy serve` is reloading it). Inference here has no
# side effects, so resending the same request is always safe. INVALID_ARGUMENT (the request's fault) and
# NOT_FOUND on a ready server (no such model) are final.
TRANSIENT = {
    "StatusCode.UNAVAILABLE",
    "StatusCode.INTERNAL",
    "StatusCode.UNKNOWN",
    "StatusCode.DEADLINE_EXCEEDED",
    "StatusCode.RESOURCE_EXHAUSTED",
    "StatusCode.CANCELLED",
}


def grpc_client(url: str, tls: Tls | None = None, *, aio: bool = False):
    """A tritonclient gRPC client for `url` (asyncio's with `aio`): plaintext, or over TLS with `tls`'s CA and client
    certificate. The one place this project makes gRPC clients."""
    if aio:
        from tritonclient.grpc.aio import InferenceServerClient
    else:
        from tritonclient.grpc import InferenceServerClient
    if tls is None:
        return InferenceServerClient(url=url)
    files = {"root_certificates": tls.ca, "private_key": tls.key, "certificate_chain": tls.cert}
    return InferenceServerClient(url=url, ssl=True, **{k: str(v) for k, v in files.items() if v is not None})


def connect_fix(url: str, tls: Tls | None) -> str:
    """What to try when nothing answers at `url`: a server that is not there, or one that speaks TLS otherwise."""
    if tls is None:
        return (
            "start one with `tritonserver --model-repository=models` (or `ernie-deploy serve --repository models`) or "
            "pass --grpc-url; "
            "if the server serves gRPC over TLS, pass "
            "--tls-ca (the CA that signed its certificate), and under mutual TLS --tls-cert and --tls-key"
        )
    return (
        f"check the server at {url} is up and serves gRPC over TLS with a certificate --tls-ca signed (for "
        "this host name or IP); under mutual TLS pass --tls-cert and --tls-key signed by the CA it trusts"
    )


@dataclass(frozen=True)
class Retry:
    """Exponential backoff with full jitter (so many clients do not retry in step), bounded by attempts and
    by a total time budget."""

    attempts: int = 8  # with these delays: about 5 s of retrying on average, 12 s at most
    base_s: float = 0.1
    max_s: float = 4.0
    budget_s: float = 60.0

    def delays(self):
        for n in range(self.attempts - 1):
            yield random.uniform(0, min(self.max_s, self.base_s * 2**n))


NO_RETRY = Retry(attempts=1)


@dataclass(frozen=True)
class TextError:
    """Stands in the results for a text the server cannot take; the other texts keep their places."""

    index: int
    problem: str

    def __str__(self) -> str:
        return f"text {self.index} {self.problem}"


class Client:
    """Calls served model `model` (default: the task's demo model), a model of `task`, whose outputs it reads. Given
    the model's record (a ModelSpec) it speaks the model's wire (core.io: `build --io`) and reads its answers back as
    the task's own tensors; given a name, the task's own tensors."""

    def __init__(
        self,
        task: TaskSpec,
        url: str = DEFAULT_GRPC_URL,
        *,
        model: str | ModelSpec | None = None,
        timeout_s: float = 60.0,
        retry: Retry = Retry(),
        tls: Tls | None = None,
        asked: tuple[str, ...] = (),
    ):
        import tritonclient.grpc as grpcclient

        self.task = task
        record = model if isinstance(model, ModelSpec) else None
        self.model = record.name if record is not None else model or DEMO_MODELS[task.name]
        self.wire = record.wire if record is not None else wire(task)
        self.labels = record.labels if record is not None else ()
        self.url = url
        self.timeout_s = timeout_s
        self.retry = retry
        self.tls = tls
        # The answers computed on request only (core.tasks.ON_REQUEST: "probabilities", "logits") this client reads.
        self.asked = tuple(asked)
        self.retries = 0  # how many resends this client has made (reported by the soak test)
        self._grpc = grpcclient
        self.client = grpc_client(url, tls)

    def check_ready(self) -> None:
        """Fail with a clear message when the server or the model is not there."""
        from tritonclient.utils import InferenceServerException

        try:
            live = self.client.is_server_live(client_timeout=self.timeout_s)
        except InferenceServerException as exc:
            how = f" over {self.tls.describe()}" if self.tls is not None else ""
            raise ServerNotReadyError(
                f"no Triton server answers at {self.url}{how} ({exc.message()})", connect_fix(self.url, self.tls)
            ) from None
        if not live or not self.client.is_server_ready():
            raise ServerNotReadyError(f"the Triton server at {self.url} is not ready", "wait for it to finish loading")
        model = self.model
        if not self.client.is_model_ready(model):
            raise ServerNotReadyError(
                f"model {model!r} is not ready on {self.url}",
                "check the server log; build it with `scripts/convert.sh`",
            )
        # A model of another task would be read wrongly, not fail: its outputs say which it is. (Metadata, not the
        # config: the model-config API may be restricted to the admin key, the metadata never is.)
        served = {o.name for o in self.client.get_model_metadata(model).outputs}
        wanted = {o.name for o in self.wire.read_specs(self.asked)}
        if not wanted <= served and {o.name for o in self.wire.read_specs()} <= served:
            raise BadOptionsError(
                f"model {model!r} on {self.url} answers no {', '.join(sorted(wanted - served))}: it was built before "
                "classifiers answered every label's probability",
                "rebuild it with `ernie-deploy build` (the same options), or leave out --all-scores",
            )
        if not wanted <= served:
            raise BadOptionsError(
                f"model {model!r} on {self.url} answers with {sorted(served)}; this client reads {self.task.name} "
                f"answers ({sorted(wanted)})",
                f"use the client of that model's task and wire (a model built with --io paddlenlp answers PaddleNLP's "
                f"tensors: clients/paddlenlp_client.py), or pass the name of a {self.task.name} model",
            )

    def infer(self, texts: list) -> dict[str, np.ndarray]:
        """One request holding `texts` (for a pair model, (text, text_pair) tuples); returns every output of the
        ensemble, first axis = texts.

        Transient failures are retried with backoff (see `Retry`); a bad request raises `BadRequest` at once."""
        from tritonclient.utils import InferenceServerException

        columns = input_columns(self.task, texts)
        tensors = wire_inputs(self.wire, columns)
        answered = self.wire.read_specs(self.asked)
        outputs = [self._grpc.InferRequestedOutput(o.name) for o in answered]
        t0, tries, delays = time.monotonic(), 0, self.retry.delays()
        while True:
            tries += 1
            try:
                result = self.client.infer(self.model, tensors, outputs=outputs, client_timeout=self.timeout_s)
                answers = {o.name: result.as_numpy(o.name) for o in answered}
                return native_answers(self.wire, answers, _as_text(columns[0]), self.labels)
            except InferenceServerException as exc:
                status, message = str(exc.status()), exc.message() or str(exc)
                if status == "StatusCode.INVALID_ARGUMENT":
                    # A step's refusal ends with its fix, as str() of an ErnieDeployError writes it: kept as the fix.
                    problem, _, fix = message.partition("\n  fix: ")
                    raise BadRequest(
                        f"{self.model!r} refused the request: {problem}",
                        fix or "correct the texts as the message says; sent again unchanged, they are refused again",
                    ) from None
                transient = self._transient(status)
                delay = next(delays, None) if transient else None
                spent = time.monotonic() - t0
                if delay is None or spent + delay > self.retry.budget_s:
                    tried = f" after {tries} attempts over {spent:.1f} s" if tries > 1 else ""
                    # What the retries were for (a server or step not answering) is not ready yet; the rest is not.
                    failure = ServerNotReadyError if transient else FailedRequestsError
                    raise failure(
                        f"inference on {self.model!r} at {self.url} failed{tried}: {message} ({status.split('.')[-1]})",
                        "check that the server is running and ready (ernie-deploy serve prints its log path)",
                    ) from None
                self.retries += 1
                time.sleep(delay)

    def _transient(self, status: str) -> bool:
        if status in TRANSIENT:
            return True
        if status == "StatusCode.NOT_FOUND":  # models are not known yet while a restarted server loads them
            try:
                return not self.client.is_server_ready()
            except Exception:
                return True
        return False

    def infer_all(self, texts: list[str], batch_size: int = 32, progress: bool = True) -> dict[str, np.ndarray]:
        from tqdm import tqdm

        parts: dict[str, list[np.ndarray]] = {}
        starts = range(0, len(texts), batch_size)
        for start in tqdm(starts, desc=f"{self.model} over gRPC", unit="batch", disable=not progress):
            for name, value in self.infer(texts[start : start + batch_size]).items():
                parts.setdefault(name, []).append(value)
        return {name: np.concatenate(values) for name, values in parts.items()}

    def predict(
        self, texts: list[str], batch_size: int = 32, progress: bool = True, *, keep_going: bool = False
    ) -> list:
        """Per-text predictions as `evaluate` makes them offline: label names, entity lists or lists of
        {"label", "score"} (`decode_outputs`).

        A bad text fails its whole request on the server (Triton answers per request). With keep_going,
        texts the server would refuse are found here first, with the server's own rules, and come back as
        `TextError`s in their places; the good ones are sent, answered and returned in order."""
        if not keep_going:
            return decode_outputs(self.task, self.infer_all(texts, batch_size, progress))
        results: list = [None] * len(texts)
        good = []
        columns = input_columns(self.task, texts)
        for i in range(len(texts)):
            problems = [
                f"{spec.name} {problem}" if len(columns) > 1 else problem
                for spec, column in zip(self.task.inputs, columns)
                if (problem := text_problem(column[i].encode("utf-8") if isinstance(column[i], str) else column[i]))
            ]
            if problems:
                results[i] = TextError(i, "; ".join(problems))
            else:
                good.append(i)
        if good:
            for i, pred in zip(good, self.predict([texts[i] for i in good], batch_size, progress)):
                results[i] = pred
        return results

    def close(self) -> None:
        self.client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def wire_inputs(wire, columns: list[list]) -> list:
    """The request tensors of `columns` (input_columns) under the names of the model's wire (core.io): BYTES [n, 1]
    each, str texts UTF-8 encoded. tritonclient's InferInput, which its blocking and asyncio clients both send."""
    from tritonclient.grpc import InferInput

    tensors = []
    for spec, column in zip(wire.input_specs(), columns):
        data = np.array([t.encode("utf-8") if isinstance(t, str) else t for t in column], dtype=np.object_)
        tensor = InferInput(spec.name, [len(column), 1], "BYTES")
        tensor.set_data_from_numpy(data.reshape(-1, 1))
        tensors.append(tensor)
    return tensors


def _as_text(column: list) -> list[str]:
    return [t.decode("utf-8", "replace") if isinstance(t, bytes | bytearray) else str(t) for t in column]


def input_columns(task: TaskSpec, items: list) -> list[list]:
    """Items as the model's input tensors take them: one column of texts, or for a pair model the texts and their
    pairs from (text, text_pair) tuples. A task with options beside its text (an extraction model's schema) takes
    plain texts, its options left unsent, or a (text, option, ...) tuple per text."""
    every = (*task.inputs, *task.options)
    if len(task.inputs) == 1 and not any(isinstance(item, tuple | list) for item in items):
        return [list(items)]
    if len(every) == 1:
        bad = next(i for i, item in enumerate(items) if isinstance(item, tuple | list))
        raise BadRequest(
            f"item {bad} is a {type(items[bad]).__name__}, but a {task.name} model takes one text",
            "send plain strings, or call a pair model",
        )
    names = [spec.name for spec in every]
    bad = [i for i, item in enumerate(items) if not isinstance(item, tuple | list) or len(item) != len(names)]
    if bad:
        raise BadRequest(
            f"item {bad[0]} is {items[bad[0]]!r}; a {task.name} model takes {' and '.join(names)} per item",
            f"send ({', '.join(names)}) tuples",
        )
    return [list(column) for column in zip(*items)] if items else [[] for _ in names]


def decode_outputs(task: TaskSpec, out: dict[str, np.ndarray]) -> list:
    """Per-text predictions from the ensemble's outputs: label names, or entity lists (each kind's `decode`:
    client.wire.KIND_CLIENT)."""
    kind = KIND_CLIENT[task.kind]
    column = out[task.prediction]
    return [kind.decode(item) for item in (column if kind.row else column[:, 0])]


def was_truncated(out: dict[str, np.ndarray], i: int) -> bool:
    """Whether the server says text i was cut (a model built before classifiers said so has no `truncated`)."""
    return "truncated" in out and bool(out["truncated"][i, 0])
