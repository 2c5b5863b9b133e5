"""The opt-in timing of a python step's phases (serving.timing): off without its environment variable, each phase
reported with it, and the lone-request benchmark's arithmetic over what it writes (benchmarks/lone_request_parts.py)."""

from __future__ import annotations

import json
import sys
import types

import numpy as np
import pytest

from benchmarks.lone_request_parts import breakdown, match, read_timings
from ernie_deploy.core.errors import FailedRequestsError
from ernie_deploy.server.stats import ModelTimes
from ernie_deploy.serving import timing
from ernie_deploy.serving.step import split_rows
from ernie_deploy.serving.triton_model import StepModel
from tests.test_steps import _fused_config, _step_files


class _Tensor:
    def __init__(self, name, array):
        self.name, self.array = name, array

    def as_numpy(self):
        return self.array


class _Request:
    def __init__(self, text: str):
        self.tensors = {"text": _Tensor("text", np.array([[text.encode("utf-8")]], dtype=np.object_))}

    def requested_output_names(self):
        return []


class _Error:
    INVALID_ARG, INTERNAL = 1, 2

    def __init__(self, message: str, code: int):
        self.message, self.code = message, code


def _fake_backend():
    """What StepModel reads of triton_python_backend_utils, in plain Python."""
    return types.SimpleNamespace(
        get_input_tensor_by_name=lambda request, name: request.tensors.get(name),
        Tensor=_Tensor,
        InferenceResponse=lambda output_tensors=None, error=None: types.SimpleNamespace(
            output_tensors=output_tensors, error=error
        ),
        TritonError=_Error,
        TritonModelException=RuntimeError,
    )


@pytest.fixture
def fused_model(tiny_pipeline, tmp_path, monkeypatch):
    """A StepModel over the tiny classifier's fused step, initialized as Triton initializes it."""
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", _fake_backend())
    folder = tmp_path / "repo" / "1"
    folder.mkdir(parents=True)
    _step_files(tiny_pipeline, folder)
    config = _fused_config(tiny_pipeline)

    def make():
        model = type("TritonPythonModel", (StepModel,), {"step": "pipeline"})()
        args = {"model_config": json.dumps(config), "model_repository": str(tmp_path / "repo"), "model_version": "1"}
        model.initialize(args)
        return model

    return make, config["name"]


def test_off_without_its_variable_nothing_is_wrapped(fused_model, monkeypatch):
    monkeypatch.delenv(timing.ENV, raising=False)
    make, _ = fused_model
    model = make()
    assert model.timer is None
    # the plain path: the step's methods are its class's own, none replaced by a timer
    assert "run" not in vars(model.impl.tokenizer) and "run" not in vars(model.impl.model)
    assert "check_request" not in vars(model.impl)
    responses = model.execute([_Request("国足公布世预赛名单")])
    assert responses[0].error is None and {t.name for t in responses[0].output_tensors} >= {"label", "confidence"}


def test_on_each_phase_of_each_execute_is_reported(fused_model, monkeypatch, tmp_path):
    folder = tmp_path / "timings"
    monkeypatch.setenv(timing.ENV, str(folder))
    make, name = fused_model
    model = make()
    responses = model.execute([_Request("国足公布世预赛名单"), _Request("")])
    assert responses[0].error is None and responses[1].error is not None  # a bad request still fails alone
    model.execute([_Request("股市大涨 abc123")])
    model.finalize()
    rows = read_timings(folder, name)
    assert [r["requests"] for r in rows] == [2, 1]
    for row in rows:
        assert row["end_ns"] > row["start_ns"]
        for phase in timing.PHASES:
            if phase != "step_other":
                assert row[phase] > 0, phase
        inside = sum(row[p] for p in timing.PHASES if p not in ("inputs", "response"))
        # every phase lies inside the execute, and step_other is what the step's run left to no phase
        assert row["inputs"] + inside + row["response"] <= row["end_ns"] - row["start_ns"]


def test_a_timer_flushes_in_blocks_and_at_close(tmp_path):
    timer = timing.PhaseTimer(tmp_path / "m.1.csv")
    for k in range(timing.FLUSH_EVERY + 3):
        timer.add("model", 5)
        timer.add("tokenize", 2)
        timer.done(1, 100 * k, 100 * k + 50, 9)
    assert len(read_timings(tmp_path, "m")) == timing.FLUSH_EVERY  # the last 3 wait for the next block
    timer.close()
    rows = read_timings(tmp_path, "m")
    assert len(rows) == timing.FLUSH_EVERY + 3
    assert (rows[0]["model"], rows[0]["tokenize"], rows[0]["step_other"]) == (5, 2, 2)


def _times(requests: int, **ms) -> ModelTimes:
    return ModelTimes(
        requests=requests, executions=requests, texts=requests, **{k: int(v * 1e6 * requests) for k, v in ms.items()}
    )


def test_the_breakdown_adds_up_to_the_clients_time():
    # three lone requests of 3 ms each; Triton held each 2.5 ms: 0.1 queued, compute 0.1 + 2.0 + 0.2
    client = [(k * 10_000_000, k * 10_000_000 + 3_000_000) for k in range(3)]
    triton = _times(3, total_ns=2.5, queue_ns=0.1, input_ns=0.1, infer_ns=2.0, output_ns=0.2)
    phases = dict.fromkeys(timing.PHASES, 0) | {"tokenize": 200_000, "model": 1_000_000, "response": 100_000}
    executes = [{"requests": 1, "start_ns": t0 + 600_000, "end_ns": t0 + 2_100_000, **phases} for t0, _ in client]
    got = breakdown(client, triton, executes)
    parts = got["parts_ms"]
    assert parts["grpc"] == pytest.approx(0.5) and parts["queue"] == pytest.approx(0.1)
    assert parts["triton"] == pytest.approx(0.1)  # 2.5 less queue and compute
    assert parts["ipc"] == pytest.approx(2.3 - 1.5)  # compute less the execute
    assert parts["model"] == pytest.approx(1.0) and parts["tokenize"] == pytest.approx(0.2)
    outside = ("grpc", "triton", "queue", "ipc")
    assert sum(parts[p] for p in outside) + got["execute_ms"] == pytest.approx(got["client_ms"])
    assert got["to_execute_ms"] == pytest.approx(0.6) and got["from_execute_ms"] == pytest.approx(0.9)
    assert got["matched"] == 3
    # Triton's statistics and the client alone (a build without the step timing): no ipc, no phases
    plain = breakdown(client, triton, None)["parts_ms"]
    assert "ipc" not in plain and "model" not in plain and plain["grpc"] == pytest.approx(0.5)


def test_executes_are_matched_to_the_call_they_fell_in():
    client = [(0, 100), (200, 300), (400, 500)]
    executes = [{"start_ns": 10, "end_ns": 90}, {"start_ns": 150, "end_ns": 160}, {"start_ns": 420, "end_ns": 480}]
    got = match(client, executes)
    assert got == [executes[0], None, executes[2]]  # the warm-up's stray execute fell in no call
    with pytest.raises(FailedRequestsError):
        breakdown([], _times(0), None)


def test_split_rows_gives_each_request_its_rows():
    assert split_rows([2, 0, 3]) == [slice(0, 2), slice(2, 2), slice(2, 5)]
    assert split_rows([np.int64(1)]) == [slice(0, 1)] and split_rows([]) == []


def test_every_variant_is_built_by_one_of_the_two_trees():
    from benchmarks.lone_request import VARIANTS

    assert {"before", "after"} <= set(VARIANTS)
    assert all(tree in ("before", "after") for tree, _ in VARIANTS.values())


def _record(c1_p50: float, c8: float, load: float) -> dict:
    parts = {
        "grpc": 0.3, "triton": 0.01, "queue": 0.04, "compute_input": 0.02, "compute_infer": 1.5, "compute_output": 0.2,
        "ipc": 0.4, "inputs": 0.01, "check": 0.02, "tokenize": 0.15, "model": 0.95, "post": 0.05, "watch": 0.05,
        "step_other": 0.03, "response": 0.07,
    }  # fmt: skip
    lone = {"parts_ms": parts, "client_ms": 2.0, "client_p50_ms": 1.9}
    cells = {"1": {"p50_ms": c1_p50, "load_average": [load, 1, 1]}, "8": {"texts_per_s": c8, "load_average": [load]}}
    summary = {
        variant: {
            "lone": lone, "c1_p50_ms": c1_p50, "c1_added_ms": c1_p50 - 0.7, "c1_load_average": [load, 1, 1],
            "c8_texts_per_s": c8, "c8_ratio": c8 / 1600, "c8_p50_ms": 9.0, "c8_texts_per_execute": 4.5,
            "c8_load_average": [load, 1, 1],
        }
        for variant in ("before", "after")
    }  # fmt: skip
    phases = {p: parts[p] for p in (*timing.STEP_PHASES, "step_other")}
    step = {"p50_ms": 1.0, "mean_ms": 1.05, "phases_ms": phases}
    return {
        "summary": summary,
        "in_process_limit": {"b1_p50_ms": 0.7, "best_batch": 32, "best_texts_per_s": 1600.0},
        "in_process_step": {"before": step, "after": step},
        "rounds": [{"variant": v, "round": 0, "lone": lone, "cells": cells} for v in ("before", "after")],
    }


@pytest.mark.parametrize(
    ("c1_p50", "c8", "load", "verdicts"),
    [
        (1.6, 900.0, 0.5, ("+1.0 ms on a quiet host", "met.**", "at least 0.5×: met")),
        (2.1, 700.0, 0.5, ("+1.0 ms on a quiet host", "not met.**", "at least 0.5×: not met")),
        (2.1, 700.0, 3.0, ("+1.5 ms on a slow host", "met.**", "at least 0.5×: not met")),
    ],
)
def test_the_page_reads_each_target_from_the_run(c1_p50, c8, load, verdicts):
    from benchmarks.page_lone import _reading

    text = _reading(_record(c1_p50, c8, load))
    first, second = text.splitlines()[:2]
    assert verdicts[0] in first and first.endswith(verdicts[1]) and verdicts[2] in second
    assert f"{1000 / c8 - 1000 / 1600:.2f} ms more" in text  # c8's cost a text beyond the limit's best batch
