"""`python -m benchmarks.refused_bodies` in miniature: one request of each refused body through a real gateway, each
answered 413, with the gateway's CPU, time and memory recorded."""

from __future__ import annotations

import pytest

from benchmarks.refused_bodies import BODIES, measure
from tests.conftest import artifacts

pytestmark = pytest.mark.integration


def test_each_refused_body_is_answered_413_and_its_cost_recorded(tiny_pipeline, tmp_path):
    from ernie_deploy.repository.build import build
    from ernie_deploy.repository.options import BuildOptions

    build(artifacts(tiny_pipeline, "news"), tmp_path / "models", BuildOptions(runtime="python"))
    start, *rows = measure(tmp_path / "models", "news", 1, tmp_path)
    assert start["memory_kib_before"]["VmRSS"] > 0
    assert [(r["body"], r["sent"]) for r in rows] == [
        (body, sent) for body in BODIES for sent in ("Content-Length", "chunked")
    ]
    for r in rows:
        assert r["bytes"] == BODIES[r["body"]] and r["gateway_cpu_ms"] >= 0 and r["wall_ms_p50"] > 0
        assert r["memory_kib"]["VmHWM"] >= r["memory_kib"]["VmRSS"] > 0
