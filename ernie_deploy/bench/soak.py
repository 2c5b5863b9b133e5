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

from ernie_deploy.bench.config import TaskInputs
from ernie_deploy.bench.inprocess import reference_predictions
from ernie_deploy.client.grpc_client import Client, Retry, decode_outputs
from ernie_deploy.core.errors import BadRequest, ErnieDeployError
from ernie_deploy.core.tasks import TaskSpec
from ernie_deploy.core.tls import ServerTls, Tls
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
    """One task's texts and what the offline ONNX model predicts for each."""

    task: TaskSpec
    texts: list[str]
    expected: list


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
    from tqdm import tqdm

    plan = _plan(cases, requests, bad_fraction, seed)
    report = SoakReport(requests=requests, concurrency=concurrency, bad_requests=sum(1 for *_, bad in plan if bad))
    report.good_requests = requests - report.bad_requests
    report.texts = sum(len(rows) for _, rows, _ in plan)
    lock = threading.Lock()
    next_request = iter(range(requests))
    done = [0]
    pid0 = server.pid if server is not None else None
    restarts0 = len(server.watchdog.restarts) if server is not None and server.watchdog else 0
    bar = tqdm(total=requests, desc="soak", unit="req", disable=not progress)

    def fail(kind: str, text: str) -> None:
        with lock:
            setattr(report, kind, getattr(report, kind) + 1)
            if len(report.examples) < 10:
                report.examples.append(text[:300])

    def worker() -> None:
        clients = {c.task.ensemble: Client(c.task, url, retry=retry, tls=tls) for c in cases}
        try:
            while True:
                with lock:
                    n = next(next_request, None)
                if n is None:
                    return
                c, rows, bad = plan[n]
                task = cases[c].task
                texts = [text for text, _ in rows]
                try:
                    out = clients[task.ensemble].infer(texts)
                except BadRequest as exc:
                    if bad and _check_refusal(str(exc), rows, bad):
                        with lock:
                            report.refused += 1
                    else:
                        fail("unexpected_errors", f"request {n}: refused {texts!r}: {exc}")
                except Exception as exc:  # the client already retried what was worth retrying
                    fail("unexpected_errors", f"request {n}: {type(exc).__name__}: {exc}")
                else:
                    got = decode_outputs(task, out)
                    if bad:
                        fail("unexpected_errors", f"request {n}: bad texts {texts!r} were answered")
                    elif got != [want for _, want in rows]:
                        fail(
                            "mismatches",
                            f"request {n}: {texts!r}: served {got!r}, offline {[want for _, want in rows]!r}",
                        )
                    else:
                        with lock:
                            report.answered += 1
                with lock:
                    done[0] += 1
                    bar.update(1)
        finally:
            with lock:
                report.client_retries += sum(client.retries for client in clients.values())
            for client in clients.values():
                client.close()

    stop_chaos = threading.Event()

    def chaos() -> None:
        from ernie_deploy.server.watchdog import stub_processes

        rng = random.Random(seed + 1)
        while not stop_chaos.wait(chaos_s) and not (chaos_kills and report.stubs_killed >= chaos_kills):
            stubs = sorted(stub_processes(server.pid))
            if stubs:
                try:
                    os.kill(rng.choice(stubs), signal.SIGKILL)
                    report.stubs_killed += 1
                except ProcessLookupError:
                    pass

    t0 = time.monotonic()
    threads = [threading.Thread(target=worker, name=f"soak-{i}") for i in range(concurrency)]
    if chaos_s and server is not None:
        threads.append(threading.Thread(target=chaos, name="soak-chaos", daemon=True))
    for t in threads:
        t.start()
    for t in threads[:concurrency]:
        t.join()
    stop_chaos.set()
    bar.close()
    report.duration_s = round(time.monotonic() - t0, 2)
    report.requests_per_s = round(requests / report.duration_s, 1) if report.duration_s else 0.0
    # Every request a worker finished is counted once above; whatever is not was never answered.
    report.lost = requests - (report.answered + report.refused + report.unexpected_errors + report.mismatches)
    if server is not None:
        report.server_restarts = int(server.pid != pid0 or not server.is_running())
        if server.watchdog:
            report.stub_restarts = len(server.watchdog.restarts) - restarts0
    return report


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
    from ernie_deploy.repository.build import served_models
    from ernie_deploy.server.process import TritonServer

    repository = Path(repository)
    tasks = list(served_models(repository).values())
    if not tasks:
        raise ErnieDeployError(f"no served models in {repository}", "build it with `scripts/convert.sh`")
    cases = []
    for task in tasks:
        inputs = TaskInputs.load(task, max_texts=options.texts)
        cases.append(SoakCase(task, inputs.texts, reference_predictions(inputs, inputs.texts)))
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
        "tasks": [t.name for t in tasks],
        "models": [t.ensemble for t in tasks],
        "texts_per_task": options.texts,
        "bad_fraction": options.bad_fraction,
        "chaos_s": options.chaos_s,
        "seed": options.seed,
    }
    ok = report.clean and report.answered == report.good_requests and report.refused == report.bad_requests
    return result, ok
