"""`python -m benchmarks.gateway_profile` in miniature: a lone request's phases through the gateway, timed on a real
tritonserver, against direct gRPC."""

from __future__ import annotations

import pytest


@pytest.mark.integration
def test_the_gateway_profile_smoke_runs(tiny_pipeline, tmp_path):
    from benchmarks.gateway_profile import OWN, PHASES, profile, render
    from ernie_deploy.evaluate.inputs import ModelInputs

    p = tiny_pipeline
    item = ModelInputs(p.static.spec, p.onnx, p.static, ["国足公布世预赛名单", "股市大涨", "新闻 game"] * 10)
    for route in ("simple", "hf"):
        result = profile(item, tmp_path / route, requests=30, warmup=5, route=route)
        assert result["requests"] == 30 and set(result["phases_p50_ms"]) == set(PHASES)
        assert result["phases_p50_ms"]["grpc"] > 0 and result["direct_grpc_p50_ms"] > 0
        assert result["own_p50_ms"] == pytest.approx(sum(result["phases_p50_ms"][p] for p in OWN))
        assert "lone requests: gateway p50" in render(result)


def test_the_in_flight_gauge_is_read_when_scraped_and_series_are_looked_up_once():
    from prometheus_client import generate_latest

    from ernie_deploy.gateway.metrics import Metrics

    metrics, in_flight = Metrics(), [0]
    metrics.count_in_flight(lambda: in_flight[0])
    in_flight[0] = 3
    for status in (200, 200, 503):
        metrics.observe("/models/{model}", status, 0.002, None if status == 200 else "overloaded")
    text = generate_latest(metrics.registry).decode()
    assert "ernie_gateway_inference_in_flight 3.0" in text
    assert 'ernie_gateway_requests_total{route="/models/{model}",status="200"} 2.0' in text
    assert 'ernie_gateway_requests_total{route="/models/{model}",status="503"} 1.0' in text
    assert 'ernie_gateway_errors_total{error_type="overloaded",route="/models/{model}",status="503"} 1.0' in text
    assert 'ernie_gateway_request_duration_seconds_count{route="/models/{model}"} 3.0' in text


def test_the_requested_outputs_are_made_once_per_record_and_asked():
    from types import SimpleNamespace

    from ernie_deploy.gateway.triton import Triton

    made = []

    def record(names):
        def read_specs(asked):
            made.append(asked)
            return [SimpleNamespace(name=n) for n in (*names, *asked)]

        return SimpleNamespace(wire=SimpleNamespace(read_specs=read_specs))

    triton = Triton("localhost:1")
    first = SimpleNamespace(record=record(["label", "confidence"]))
    wire, answered, outputs = triton._outputs(first, ())
    assert [o.name() for o in outputs] == ["label", "confidence"] and wire is not None
    assert triton._outputs(first, ())[2] is outputs  # the same objects: made once
    assert [o.name() for o in triton._outputs(first, ("probabilities",))[2]][-1] == "probabilities"
    rolled = SimpleNamespace(record=record(["label"]))  # a rollout's new record
    assert [o.name() for o in triton._outputs(rolled, ())[2]] == ["label"]
    assert made == [(), ("probabilities",), ()]
