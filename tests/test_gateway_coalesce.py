"""Concurrent requests to one model merged into one Triton call (gateway.coalesce, `ernie-deploy gateway
--coalesce-ms`) and split back per request: in order, each request its own rows, at most the model's max_batch_size
texts and max_request_chars characters a call, a lone request sent at once, and a bad request failing alone with the
error it gets alone. The unit tests drive the coalescer with a stand-in for the gRPC call; the integration tests send
concurrent requests through a real gateway to a real tritonserver."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import numpy as np
import pytest

from ernie_deploy.core.errors import BadOptionsError
from ernie_deploy.core.settings import ServingSettings
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.core.tasks import PAIR_CLS, SEQ_CLS
from ernie_deploy.gateway.coalesce import Coalescer
from ernie_deploy.gateway.errors import GatewayError
from ernie_deploy.gateway.models import ServedModel


def _model(max_batch_size: int = 8, max_request_chars: int = 1000, task=SEQ_CLS) -> ServedModel:
    serving = ServingSettings(max_batch_size=max_batch_size)
    record = ModelSpec.new(task, "m", labels=("a", "b"), serving=serving, max_request_chars=max_request_chars)
    return ServedModel(record)


def _refused(text: str) -> GatewayError:
    return GatewayError(422, "validation", f"text {text!r} is refused", fix="send another")


class FakeTriton:
    """Triton._infer's stand-in: each item's answer is its own text, a call holding "bad" is refused as Triton
    refuses a request holding a bad text, and the calls named in `held` wait until released."""

    def __init__(self, failure: GatewayError | None = None):
        self.calls: list[list] = []
        self.held: dict[int, asyncio.Event] = {}
        self.failure = failure  # every call of more than one item fails so, when given

    def hold(self, call: int) -> asyncio.Event:
        self.held[call] = asyncio.Event()
        return self.held[call]

    async def send(self, model, items: list, asked: tuple) -> dict[str, np.ndarray]:
        index = len(self.calls)
        self.calls.append(list(items))
        if index in self.held:
            await self.held[index].wait()
        else:
            await asyncio.sleep(0)
        if self.failure is not None and len(items) > 1:
            raise self.failure
        bad = next((item for item in items if "bad" in str(item)), None)
        if bad is not None:
            raise _refused(str(bad))
        texts = [str(item).encode() for item in items]
        return {
            "label": np.array(texts, dtype=np.object_).reshape(-1, 1),
            "confidence": np.arange(len(items), dtype=np.float32).reshape(-1, 1),
            "asked": np.array([repr(asked).encode()] * len(items), dtype=np.object_).reshape(-1, 1),
        }


def _labels(answers: dict) -> list[str]:
    return [item.decode() for item in answers["label"][:, 0]]


async def _settle_loop(turns: int = 20) -> None:
    for _ in range(turns):
        await asyncio.sleep(0)


def test_a_lone_request_is_sent_at_once_without_waiting_the_window():
    async def go():
        fake = FakeTriton()
        coalescer = Coalescer(fake.send, window_s=30.0)
        t0 = time.perf_counter()
        answers = await asyncio.wait_for(coalescer.infer(_model(), ["a", "b"]), 5)
        return fake, answers, time.perf_counter() - t0

    fake, answers, seconds = asyncio.run(go())
    assert fake.calls == [["a", "b"]] and _labels(answers) == ["a", "b"]
    assert seconds < 1.0, f"a lone request waited {seconds:.3f} s: it must not wait the window"


def test_requests_that_come_while_one_is_in_flight_go_as_one_call_in_order():
    async def go():
        fake = FakeTriton()
        release = fake.hold(0)
        coalescer = Coalescer(fake.send, window_s=30.0)
        model = _model()
        first = asyncio.create_task(coalescer.infer(model, ["first"]))
        await _settle_loop()
        later = [asyncio.create_task(coalescer.infer(model, texts)) for texts in (["a"], ["b", "c"], ["d"])]
        await _settle_loop()
        assert len(fake.calls) == 1, "the requests that came while one was in flight went out before it came back"
        release.set()  # the call in flight comes back: the pending one goes out at once, not after the window
        answers = await asyncio.wait_for(asyncio.gather(first, *later), 5)
        return fake, answers

    fake, answers = asyncio.run(go())
    assert fake.calls == [["first"], ["a", "b", "c", "d"]]
    assert [_labels(a) for a in answers] == [["first"], ["a"], ["b", "c"], ["d"]]
    # Each request's own rows of every output, in its order.
    assert [a["confidence"][:, 0].tolist() for a in answers] == [[0.0], [0.0], [1.0, 2.0], [3.0]]


def test_the_window_sends_the_pending_call_while_another_is_still_in_flight():
    async def go():
        fake = FakeTriton()
        release = fake.hold(0)
        coalescer = Coalescer(fake.send, window_s=0.02)
        model = _model()
        first = asyncio.create_task(coalescer.infer(model, ["first"]))
        await _settle_loop()
        later = [asyncio.create_task(coalescer.infer(model, [t])) for t in ("a", "b")]
        answers = await asyncio.wait_for(asyncio.gather(*later), 5)  # answered while the first is held
        calls = list(fake.calls)
        release.set()
        await first
        return calls, answers

    calls, answers = asyncio.run(go())
    assert calls == [["first"], ["a", "b"]] and [_labels(a) for a in answers] == [["a"], ["b"]]


def test_a_merged_call_holds_at_most_the_models_max_batch_size():
    async def go():
        fake = FakeTriton()
        release = fake.hold(0)
        coalescer = Coalescer(fake.send, window_s=30.0)
        model = _model(max_batch_size=4)
        first = asyncio.create_task(coalescer.infer(model, ["first"]))
        await _settle_loop()
        sent = [["a", "b"], ["c", "d"], ["e", "f", "g"], ["h", "i"]]
        later = [asyncio.create_task(coalescer.infer(model, texts)) for texts in sent]
        await _settle_loop()
        # Full at 4 texts: sent without waiting the window; a part that would not fit sends the pending call and
        # waits in the next.
        full = list(fake.calls)
        release.set()
        answers = await asyncio.wait_for(asyncio.gather(first, *later), 5)
        return full, fake, sent, answers

    full, fake, sent, answers = asyncio.run(go())
    assert full == [["first"], ["a", "b", "c", "d"], ["e", "f", "g"]]
    assert fake.calls[3:] == [["h", "i"]], "the pending call did not go out when the model's calls came back"
    assert [_labels(a) for a in answers] == [["first"], *sent]


def test_a_merged_call_holds_at_most_the_models_request_characters():
    async def go():
        fake = FakeTriton()
        release = fake.hold(0)
        coalescer = Coalescer(fake.send, window_s=30.0)
        model = _model(max_request_chars=10)
        first = asyncio.create_task(coalescer.infer(model, ["x"]))
        await _settle_loop()
        later = [asyncio.create_task(coalescer.infer(model, [t * 6])) for t in "abc"]
        await _settle_loop()
        release.set()
        answers = await asyncio.wait_for(asyncio.gather(*later), 5)
        await first
        return fake, answers

    fake, answers = asyncio.run(go())
    assert fake.calls == [["x"], ["aaaaaa"], ["bbbbbb"], ["cccccc"]], "parts of 12 characters together were merged"
    assert [_labels(a) for a in answers] == [["aaaaaa"], ["bbbbbb"], ["cccccc"]]


def test_a_bad_request_among_merged_ones_fails_alone_with_its_own_error():
    async def alone():
        fake = FakeTriton()
        with pytest.raises(GatewayError) as refused:
            await Coalescer(fake.send, window_s=30.0).infer(_model(), ["bad one"])
        return refused.value

    class Counts:
        def __init__(self):
            self.merged_parts, self.resent_calls = [], 0

        def merged(self, requests):
            self.merged_parts.append(requests)

        def resent(self):
            self.resent_calls += 1

    counts = Counts()

    async def merged():
        fake = FakeTriton()
        release = fake.hold(0)
        coalescer = Coalescer(fake.send, window_s=30.0, metrics=counts)
        model = _model()
        first = asyncio.create_task(coalescer.infer(model, ["first"]))
        await _settle_loop()
        later = [asyncio.create_task(coalescer.infer(model, texts)) for texts in (["a"], ["bad one"], ["b", "c"])]
        await _settle_loop()
        release.set()
        answers = await asyncio.wait_for(asyncio.gather(first, *later, return_exceptions=True), 5)
        return fake, answers

    expected = asyncio.run(alone())
    fake, answers = asyncio.run(merged())
    # The merged call was refused, then each of its parts sent on its own.
    assert fake.calls == [["first"], ["a", "bad one", "b", "c"], ["a"], ["bad one"], ["b", "c"]]
    assert (counts.merged_parts, counts.resent_calls) == ([3], 1)  # what /metrics counts
    assert _labels(answers[0]) == ["first"] and _labels(answers[1]) == ["a"] and _labels(answers[3]) == ["b", "c"]
    error = answers[2]
    assert isinstance(error, GatewayError)
    assert (error.status, error.error_type, error.message) == (expected.status, expected.error_type, expected.message)


def test_a_merged_call_that_timed_out_is_answered_504_without_a_second_try():
    timeout = GatewayError(504, "backend", "model 'm' did not answer in time (Deadline Exceeded)", fix="send fewer")

    async def go():
        fake = FakeTriton(failure=timeout)
        release = fake.hold(0)
        coalescer = Coalescer(fake.send, window_s=30.0)
        model = _model()
        first = asyncio.create_task(coalescer.infer(model, ["first"]))
        await _settle_loop()
        later = [asyncio.create_task(coalescer.infer(model, [t])) for t in ("a", "b")]
        await _settle_loop()
        release.set()
        return fake, await asyncio.wait_for(asyncio.gather(*later, return_exceptions=True), 5), await first

    fake, errors, _ = asyncio.run(go())
    assert fake.calls == [["first"], ["a", "b"]], "a call that timed out was sent again"
    assert all(isinstance(e, GatewayError) and e.status == 504 and e.message == timeout.message for e in errors)
    assert errors[0] is not errors[1]  # each request raises its own exception


def test_requests_asking_other_answers_or_of_another_shape_are_not_merged():
    async def go():
        fake = FakeTriton()
        release = fake.hold(0)
        coalescer = Coalescer(fake.send, window_s=0.01)
        model, pairs = _model(), _model(task=PAIR_CLS)
        first = asyncio.create_task(coalescer.infer(model, ["first"]))
        await _settle_loop()
        later = [
            asyncio.create_task(coalescer.infer(model, ["a"], ("probabilities",))),
            asyncio.create_task(coalescer.infer(model, ["b"])),
            asyncio.create_task(coalescer.infer(model, ["c"], ("probabilities",))),
            asyncio.create_task(coalescer.infer(pairs, [("q", "d")])),  # another model: never in flight, at once
        ]
        await _settle_loop()
        release.set()
        answers = await asyncio.wait_for(asyncio.gather(first, *later), 5)
        return fake, answers

    fake, answers = asyncio.run(go())
    # In flight is counted per (model, asked, shape): "a" and the pair went out at once, "c" and "b" each with
    # nothing of their own to merge with; never one call across them.
    groups = [{"first", "b"}, {"a", "c"}, {("q", "d")}]
    assert all(any(set(call) <= group for group in groups) for call in fake.calls), fake.calls
    assert sorted(item for call in fake.calls for item in map(str, call)) == sorted(
        ["first", "a", "b", "c", str(("q", "d"))]
    )
    assert [_labels(a) for a in answers] == [["first"], ["a"], ["b"], ["c"], ["('q', 'd')"]]
    assert answers[1]["asked"][0, 0] == b"('probabilities',)" and answers[2]["asked"][0, 0] == b"()"


def test_a_request_cancelled_while_pending_is_not_sent():
    async def go():
        fake = FakeTriton()
        release = fake.hold(0)
        coalescer = Coalescer(fake.send, window_s=30.0)
        model = _model()
        first = asyncio.create_task(coalescer.infer(model, ["first"]))
        await _settle_loop()
        gone = asyncio.create_task(coalescer.infer(model, ["gone"]))
        kept = asyncio.create_task(coalescer.infer(model, ["kept"]))
        await _settle_loop()
        gone.cancel()
        release.set()
        answers = await asyncio.wait_for(asyncio.gather(first, kept), 5)
        return fake, answers

    fake, answers = asyncio.run(go())
    assert fake.calls == [["first"], ["kept"]] and _labels(answers[1]) == ["kept"]


def test_the_window_is_an_option_zero_turns_it_off_and_a_bad_one_is_refused(tmp_path):
    from ernie_deploy.cli import build_parser
    from ernie_deploy.gateway.app import Gateway, GatewaySettings
    from ernie_deploy.gateway.defaults import DEFAULT_COALESCE_MS

    assert Gateway(GatewaySettings(repository=tmp_path)).triton.coalescer.window_s == DEFAULT_COALESCE_MS / 1000
    assert Gateway(GatewaySettings(repository=tmp_path, coalesce_ms=0)).triton.coalescer is None
    with pytest.raises(BadOptionsError, match="--coalesce-ms"):
        Gateway(GatewaySettings(repository=tmp_path, coalesce_ms=-1))
    args = build_parser().parse_args(["gateway", "--coalesce-ms", "0.5"])
    assert args.coalesce_ms == 0.5
    assert build_parser().parse_args(["gateway"]).coalesce_ms == DEFAULT_COALESCE_MS


# -- through a real gateway and tritonserver -------------------------------------------------------------------------
SEQ = "news"
NER = "ner"
MAX_CHARS = 40
WINDOW_MS = "50"  # wide, so that the requests sent together below are merged on any host


@pytest.fixture(scope="module")
def stack(tmp_path_factory, tiny_pipeline, tiny_token_pipeline):
    """(tritonserver, gateway merging requests, gateway merging none) over the tiny classifier and NER model."""
    from ernie_deploy.gateway.process import GatewayProcess
    from ernie_deploy.repository.build import build
    from ernie_deploy.repository.options import BuildOptions
    from ernie_deploy.server.process import TritonServer
    from tests.conftest import artifacts

    work = tmp_path_factory.mktemp("coalesce")
    repo = work / "models"
    build(artifacts(tiny_pipeline, SEQ), repo, BuildOptions(runtime="python", max_text_chars=MAX_CHARS))
    build(artifacts(tiny_token_pipeline, NER), repo, BuildOptions(runtime="python"))
    with TritonServer(repo, http_port=0, grpc_port=0, metrics_port=0, log_file=work / "server.log") as server:
        merging = GatewayProcess(repo, server.grpc_url, args=["--coalesce-ms", WINDOW_MS], log_file=work / "on.log")
        alone = GatewayProcess(repo, server.grpc_url, args=["--coalesce-ms", "0"], log_file=work / "off.log")
        with merging.start(timeout=60), alone.start(timeout=60):
            yield server, merging, alone


def _request(url: str, path: str, body) -> bytes:
    host = url.split("//", 1)[1]
    data = json.dumps(body).encode()
    head = f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
    return (head + "Connection: close\r\n\r\n").encode() + data


def _together(url: str, requests: list[tuple[str, object]]) -> list[tuple[int, object]]:
    """(status, JSON) of each request, all sent at once: every connection opened first, then every request written
    before any answer is read, so the gateway reads them in one turn of its loop."""
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    sockets = [socket.create_connection((host, int(port)), timeout=30) for _ in requests]
    for sock, (path, body) in zip(sockets, requests):
        sock.sendall(_request(url, path, body))
    out = []
    for sock in sockets:
        parts = []
        while chunk := sock.recv(65536):
            parts.append(chunk)
        sock.close()
        head, _, payload = b"".join(parts).partition(b"\r\n\r\n")
        out.append((int(head.split(b" ", 2)[1]), json.loads(payload)))
    return out


def _one_by_one(url: str, requests: list[tuple[str, object]]) -> list[tuple[int, object]]:
    return [_together(url, [request])[0] for request in requests]


def _merged(gateway) -> dict[str, float]:
    """The gateway's merge counters (GET /metrics): calls merged, the requests they carried, and those resent."""
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"{gateway.url}/metrics", timeout=30) as response:
        text = response.read().decode()
    names = {
        "calls": "ernie_gateway_merged_calls_total",
        "requests": "ernie_gateway_merged_requests_total",
        "resent": "ernie_gateway_merged_calls_resent_total",
    }
    values = {line.split()[0]: float(line.split()[1]) for line in text.splitlines() if line.startswith("ernie_")}
    return {key: values[name] for key, name in names.items()}


def _less(after: dict, before: dict) -> dict:
    return {key: after[key] - before[key] for key in after}


ATTEMPTS = 5  # concurrent sends of the same requests, until the bad one is merged with good ones
TEXTS = ["国足公布世预赛名单", "股市大涨", "新闻 game", "体育教育科技社会", "中国美元亿新闻", "明天多云", "北京大学"]


@pytest.mark.integration
def test_concurrent_requests_through_a_real_server_are_answered_as_unmerged_ones(stack):
    _, merging, alone = stack
    requests = [(f"/models/{SEQ}", {"data": {"text": [t]}}) for t in TEXTS]
    requests += [(f"/hf/{SEQ}", {"inputs": TEXTS[:3]}), (f"/hf/{NER}", {"inputs": "国足公布世预赛名单"})]
    requests += [(f"/models/{NER}", {"data": {"text": TEXTS[3:]}})]
    expected = _one_by_one(alone.url, requests)
    assert all(status == 200 for status, _ in expected), expected
    before = _merged(merging)
    got = _together(merging.url, requests)
    merged = _less(_merged(merging), before)
    assert merged["requests"] >= 2 and merged["resent"] == 0, f"none of {len(requests)} requests was merged: {merged}"
    assert _merged(alone)["calls"] == 0
    for (status, answer), (_, unmerged), (path, _) in zip(got, expected, requests):
        assert status == 200, (path, answer)
        assert json.dumps(answer, sort_keys=True) == json.dumps(unmerged, sort_keys=True) or _close(answer, unmerged)


def _close(answer, unmerged) -> bool:
    """The same answer but for the last float digits a batch's other texts may move (tests/test_batch_independence)."""
    if isinstance(answer, dict) and isinstance(unmerged, dict):
        return answer.keys() == unmerged.keys() and all(_close(answer[k], unmerged[k]) for k in answer)
    if isinstance(answer, list) and isinstance(unmerged, list):
        return len(answer) == len(unmerged) and all(_close(a, b) for a, b in zip(answer, unmerged))
    if isinstance(answer, float) and isinstance(unmerged, float):
        return abs(answer - unmerged) <= 1e-5
    return answer == unmerged


@pytest.mark.integration
def test_a_bad_request_among_concurrent_good_ones_fails_alone_with_its_usual_answer(stack):
    _, merging, alone = stack
    good = [(f"/models/{SEQ}", {"data": {"text": [t]}}) for t in TEXTS[:5]]
    bad = [
        (f"/models/{SEQ}", {"data": {"text": ["中" * (MAX_CHARS + 1)]}}),  # 413: over max_text_chars
        (f"/hf/{SEQ}", {"inputs": ["股市", " "]}),  # 422: a blank text, refused by the tokenizer step
    ]
    for refused in bad:
        requests = [*good[:2], refused, *good[2:]]
        expected = _one_by_one(alone.url, requests)
        assert expected[2][0] in (413, 422) and all(status == 200 for status, _ in expected[:2] + expected[3:])
        # Whether the bad request lands in a merged call depends on when the gateway reads it (on a loaded host the
        # requests before it may be answered first): every attempt must answer each request as alone, and some
        # attempt must have merged it with good ones.
        resent = []
        for _ in range(ATTEMPTS):
            before = _merged(merging)
            got = _together(merging.url, requests)
            merged = _less(_merged(merging), before)
            assert got[2] == expected[2], f"refused as {got[2]}, alone as {expected[2]}"
            for (status, answer), (_, unmerged) in zip(got[:2] + got[3:], expected[:2] + expected[3:]):
                assert status == 200 and _close(answer, unmerged), (answer, unmerged)
            # Only a call holding the bad request is refused: one resent means it was merged with good ones.
            assert merged["resent"] <= 1, merged
            resent.append(merged["resent"])
            if merged["resent"] == 1:
                break
        assert 1 in resent, f"the bad request was never merged with good ones in {ATTEMPTS} attempts: {resent}"
