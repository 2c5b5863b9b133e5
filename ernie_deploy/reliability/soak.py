"""Soak test: many requests, good and bad mixed, at a fixed concurrency against a real server; every answer
checked against the offline ONNX result for its texts.

A request holds 1-4 texts. A bad request mixes good texts with at least one bad one (empty, blank, invalid
UTF-8, only control characters, past the default length limit) and must be refused as INVALID_ARGUMENT naming
exactly its bad texts; a good request must come back with every text's prediction equal to the in-process
onnxruntime prediction. Anything else counts: an unexpected error, a mismatched answer, a request that never got an
answer. With `chaos_s`, a random python-backend stub is SIGKILLed every `chaos_s` seconds (at most `chaos_kills`
times, if set): the launcher's watchdog reloads it and the client's retries carry the requests through.
"""

from __future__ import annotations

import os
import random
import re
import signal
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ernie_deploy.client.grpc_client import Client, Retry, decode_outputs
from ernie_deploy.core.errors import BadRepositoryError, BadRequest
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.core.tasks import TaskSpec
from ernie_deploy.core.tls import ServerTls, Tls
from ernie_deploy.evaluate.inputs import ModelInputs, reference_predictions
from ernie_deploy.server.process import TritonServer
from ernie_deploy.server.watchdog import stub_processes
from ernie_deploy.serving.entity_scores import same_entities
from ernie_deploy.serving.limits import CUT

BAD_TEXTS = [
    ("", "is empty"),
    ("  \t", "is empty"),
    (b"\xff\xfe", "is not valid UTF-8"),
    ("\x00\x01", "has only control or format characters"),
    # one character past the longest default length limit (serving.limits): refused before it is tokenized
    ("国" * (CUT.max_text_chars + 1), "max_text_chars"),
]


@dataclass
class SoakCase:
    """One served model's texts and what the offline ONNX model predicts for each."""

    model: ModelSpec
    texts: list[str]
    expected: list

    @property
    def task(self) -> TaskSpec:
        return self.model.task_spec


@dataclass
class SoakReport:
    requests: int = 0
    good_requests: int = 0
    bad_requests: int = 0
    texts: int = 0
    answered: int = 0  # good requests answered correctly
    refused: int = 0  # bad requests refused, naming exactly their bad texts
    unexpected_errors: int = 0
    mismatches: int = 0
    lost: int = 0
    client_retries: int = 0
    stubs_killed: int = 0
    stub_restarts: int = 0
    server_restarts: int = 0
    concurrency: int = 0
    duration_s: float = 0.0
    requests_per_s: float = 0.0
    examples: list[str] = field(default_factory=list)  # the first few failures, for the report

    @property
    def clean(self) -> bool:
        return not (self.unexpected_errors or self.mismatches or self.lost or self.server_restarts)

    def to_dict(self) -> dict:
        return {**asdict(self), "clean": self.clean}


def _plan(cases: list[SoakCase], requests: int, bad_fraction: float, seed: int) -> list[tuple]:
    """(case index, [(text, expected or None)], bad indices) per request, fixed by the seed."""
    rng = random.Random(seed)
    plan = []
    for _ in range(requests):
        c = rng.randrange(len(cases))
        case = cases[c]
        rows = [
            (case.texts[j], case.expected[j])
            for j in (rng.randrange(len(case.texts)) for _ in range(rng.randint(1, 4)))
        ]
        bad = []
        if rng.random() < bad_fraction:
            for _ in range(rng.randint(1, len(rows))):
                at = rng.randrange(len(rows))
                rows[at] = (_with_text(rows[at][0], rng.choice(BAD_TEXTS)[0]), None)
            bad = [i for i, (_, want) in enumerate(rows) if want is None]
        plan.append((c, rows, bad))
    return plan


def _check_refusal(message: str, rows, bad: list[int]) -> bool:
    named = sorted(int(i) for i in re.findall(r"text (\d+) (?:is|has)", message))
    return named == bad and all(
        problem in message for text, problem in BAD_TEXTS for i in bad if _text(rows[i][0]) == text
    )


def _text(item):
    """The (first) text of an item: a text, or a (text, text_pair) tuple."""
    return item[0] if isinstance(item, tuple) else item


def _with_text(item, text):
    """`item` with its (first) text replaced by `text`: a bad pair keeps its good second text."""
    return (text, *item[1:]) if isinstance(item, tuple) else text


def soak(
    url: str,
    cases: list[SoakCase],
    *,
    requests: int = 2000,
    concurrency: int = 16,
    bad_fraction: float = 0.1,
    seed: int = 0,
    server=None,
    chaos_s: float = 0.0,
    chaos_kills: int = 0,
    retry: Retry = Retry(),
    progress: bool = True,
    tls: Tls | None = None,
) -> SoakReport:
    """Drive `requests` requests through `concurrency` client threads; `server` (a TritonServer) lets the
    report count stub restarts and notice a server restart, and is needed for `chaos_s`."""
    plan = _plan(cases, requests, bad_fraction, seed)
    run = _SoakRun(url, cases, plan, retry, tls, progress)
    report = run.report
    report.concurrency = concurrency
    pid0 = server.pid if server is not None else None
    restarts0 = len(server.watchdog.restarts) if server is not None and server.watchdog else 0

    stop_chaos = threading.Event()
    t0 = time.monotonic()
    threads = [threading.Thread(target=run.worker, name=f"soak-{i}") for i in range(concurrency)]
    if chaos_s and server is not None:
        chaos = threading.Thread(
            target=_chaos, args=(server, report, stop_chaos, chaos_s, chaos_kills, seed), name="soak-chaos", daemon=True
        )
        threads.append(chaos)
    for t in threads:
        t.start()
    for t in threads[:concurrency]:
        t.join()
    stop_chaos.set()
    run.bar.close()
    report.duration_s = round(time.monotonic() - t0, 2)
    report.requests_per_s = round(requests / report.duration_s, 1) if report.duration_s else 0.0
    # Every request a worker finished is counted once above; whatever is not was never answered.
    report.lost = requests - (report.answered + report.refused + report.unexpected_errors + report.mismatches)
    if server is not None:
        report.server_restarts = int(server.pid != pid0 or not server.is_running())
        if server.watchdog:
            report.stub_restarts = len(server.watchdog.restarts) - restarts0
    return report


class _SoakRun:
    """The planned requests, shared by the client threads: each takes the next one, sends it, and counts what
    came back in the report."""

    def __init__(self, url: str, cases: list[SoakCase], plan: list[tuple], retry: Retry, tls: Tls | None, progress):
        from tqdm import tqdm

        self.url, self.cases, self.plan, self.retry, self.tls = url, cases, plan, retry, tls
        requests = len(plan)
        self.report = SoakReport(requests=requests, bad_requests=sum(1 for *_, bad in plan if bad))
        self.report.good_requests = requests - self.report.bad_requests
        self.report.texts = sum(len(rows) for _, rows, _ in plan)
        self.lock = threading.Lock()
        self.next_request = iter(range(requests))
        self.bar = tqdm(total=requests, desc="soak", unit="req", disable=not progress)

    def fail(self, kind: str, text: str) -> None:
        with self.lock:
            setattr(self.report, kind, getattr(self.report, kind) + 1)
            if len(self.report.examples) < 10:
                self.report.examples.append(text[:300])

    def worker(self) -> None:
        clients = {
            c.model.name: Client(c.task, self.url, model=c.model, retry=self.retry, tls=self.tls) for c in self.cases
        }
        try:
            while True:
                with self.lock:
                    n = next(self.next_request, None)
                if n is None:
                    return
                self._send(n, clients)
                with self.lock:
                    self.bar.update(1)
        finally:
            with self.lock:
                self.report.client_retries += sum(client.retries for client in clients.values())
            for client in clients.values():
                client.close()

    def _send(self, n: int, clients: dict[str, Client]) -> None:
        """Request `n` of the plan: a good one must be answered with the offline predictions, a bad one refused
        naming exactly its bad texts."""
        c, rows, bad = self.plan[n]
        task = self.cases[c].task
        texts = [text for text, _ in rows]
        try:
            out = clients[self.cases[c].model.name].infer(texts)
        except BadRequest as exc:
            if bad and _check_refusal(str(exc), rows, bad):
                with self.lock:
                    self.report.refused += 1
            else:
                self.fail("unexpected_errors", f"request {n}: refused {texts!r}: {exc}")
        except Exception as exc:  # the client already retried what was worth retrying
            self.fail("unexpected_errors", f"request {n}: {type(exc).__name__}: {exc}")
        else:
            got = decode_outputs(task, out)
            if bad:
                self.fail("unexpected_errors", f"request {n}: bad texts {texts!r} were answered")
            elif not same_entities(got, [want for _, want in rows]):  # entities' scores within SCORE_TOLERANCE
                self.fail(
                    "mismatches",
                    f"request {n}: {texts!r}: served {got!r}, offline {[want for _, want in rows]!r}",
                )
            else:
                with self.lock:
                    self.report.answered += 1


def _chaos(server, report: SoakReport, stop: threading.Event, every_s: float, kills: int, seed: int) -> None:
    """SIGKILL a random python-backend stub of `server` every `every_s` seconds until `stop`, at most `kills` times
    (0: no limit)."""

    rng = random.Random(seed + 1)
    while not stop.wait(every_s) and not (kills and report.stubs_killed >= kills):
        stubs = sorted(stub_processes(server.pid))
        if stubs:
            try:
                os.kill(rng.choice(stubs), signal.SIGKILL)
                report.stubs_killed += 1
            except ProcessLookupError:
                pass


@dataclass
class SoakOptions:
    """What `ernie-deploy soak` drives (its flags' defaults)."""

    requests: int = 20000
    concurrency: int = 16
    bad_fraction: float = 0.1  # share of requests holding bad texts
    texts: int = 1000  # test texts per task to draw requests from
    chaos_s: float = 0.0  # SIGKILL a random python-backend stub every this many seconds (0: never)
    chaos_kills: int = 0  # stop killing after this many (0: no limit)
    seed: int = 0
    grpc_tls: ServerTls | None = None  # serve gRPC over TLS ...
    tls: Tls | None = None  # ... and connect with this (both or neither)


def run_soak(repository: str | Path, options: SoakOptions) -> tuple[dict, bool]:
    """Serve a repository on free loopback ports and soak every model it serves, each text's answer expected to
    equal in-process ONNX on the model's artifacts. Returns (the report, whether it passed: nothing
    lost, mismatched or unexpectedly failed, every good request answered and every bad one refused)."""
    from ernie_deploy.repository.served import served_models

    repository = Path(repository)
    models = list(served_models(repository).values())
    if not models:
        raise BadRepositoryError(f"no served models in {repository}", "build it with `scripts/convert.sh`")
    cases = []
    for model in models:
        inputs = ModelInputs.load(model.name, max_texts=options.texts)
        expected = reference_predictions(inputs, inputs.texts, model)  # read as this repository serves it
        cases.append(SoakCase(model, inputs.texts, expected))
    with TritonServer(repository, http_port=0, grpc_port=0, metrics_port=0, grpc_tls=options.grpc_tls) as server:
        report = soak(
            server.grpc_url,
            cases,
            requests=options.requests,
            concurrency=options.concurrency,
            bad_fraction=options.bad_fraction,
            seed=options.seed,
            server=server,
            chaos_s=options.chaos_s,
            chaos_kills=options.chaos_kills,
            tls=options.tls,
        )
    result = {
        **report.to_dict(),
        "tasks": [m.task for m in models],
        "models": [m.name for m in models],
        "texts_per_task": options.texts,
        "bad_fraction": options.bad_fraction,
        "chaos_s": options.chaos_s,
        "seed": options.seed,
    }
    ok = report.clean and report.answered == report.good_requests and report.refused == report.bad_requests
    return result, ok
