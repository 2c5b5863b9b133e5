"""Opt-in timing of a python step's phases inside Triton: where one `execute` spends its time, for
benchmarks/lone_request.py. Off unless the server's environment sets ERNIE_DEPLOY_STEP_TIMING to a folder; off, no
step is wrapped and `execute` takes its plain path, so it costs one attribute test an `execute`.

On, each model instance writes `<model>.<pid>.csv` into that folder: a line an `execute`, with its requests, its
start and end (`time.perf_counter_ns`, CLOCK_MONOTONIC: the clock a client on the same machine reads, so the client's
send and read and these marks lie on one clock) and the ns of each phase in PHASES. Lines are written in blocks of
FLUSH_EVERY and at unload, never read back by the step.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

ENV = "ERNIE_DEPLOY_STEP_TIMING"
# An execute's phases, in order:
# - inputs: the request tensors read from Triton's (get_input_tensor_by_name, as_numpy, requested_output_names);
# - check: each request checked and its texts decoded (the step's check_request);
# - tokenize, model, post: the fused step's tokenizer, onnxruntime run and the kind's postprocess;
# - watch: what it answered counted (serving.watch);
# - step_other: the step's time in none of the above (merging, the answers' dicts);
# - response: the output tensors and the responses built (pb_utils.Tensor, InferenceResponse).
PHASES = ("inputs", "check", "tokenize", "model", "post", "watch", "step_other", "response")
STEP_PHASES = ("check", "tokenize", "model", "post", "watch")  # inside the step's run
COLUMNS = ("requests", "start_ns", "end_ns", *PHASES)
FLUSH_EVERY = 64


def timing_folder() -> Path | None:
    """The folder the environment asks timings to be written to, or None (the default: off)."""
    value = os.environ.get(ENV)
    return Path(value) if value else None


class PhaseTimer:
    """One model instance's timings: `add` ns to a phase of the current execute, `done` ends it."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("w", encoding="ascii")
        self._file.write(",".join(COLUMNS) + "\n")
        self._lines: list[str] = []
        self.current = dict.fromkeys(PHASES, 0)

    def add(self, phase: str, ns: int) -> None:
        self.current[phase] += ns

    def done(self, requests: int, start_ns: int, end_ns: int, step_ns: int) -> None:
        """End the current execute: its line, with step_other what the step's run (`step_ns`) leaves to no phase."""
        c = self.current
        c["step_other"] = step_ns - sum(c[p] for p in STEP_PHASES)
        self._lines.append(",".join(map(str, (requests, start_ns, end_ns, *(c[p] for p in PHASES)))))
        self.current = dict.fromkeys(PHASES, 0)
        if len(self._lines) >= FLUSH_EVERY:
            self.flush()

    def flush(self) -> None:
        if self._lines:
            self._file.write("\n".join(self._lines) + "\n")
            self._file.flush()
            self._lines = []

    def close(self) -> None:
        self.flush()
        self._file.close()


def _timed(owner, name: str, timer: PhaseTimer, phase: str) -> None:
    """`owner.name` (a bound method) replaced on the instance by one that adds its wall time to `phase`."""
    inner = getattr(owner, name)
    now = time.perf_counter_ns

    def wrapper(*args, **kwargs):
        t0 = now()
        try:
            return inner(*args, **kwargs)
        finally:
            timer.add(phase, now() - t0)

    setattr(owner, name, wrapper)


def _innermost(step):
    """The step a chain of wrappers (serving.wire's WireAnswers, serving.watch's Watched) holds, and the Watched on
    the way (None where the step is not watched)."""
    watched = None
    while hasattr(step, "step"):
        if hasattr(step, "_observe"):
            watched = step
        step = step.step
    return step, watched


def instrument(step, timer: PhaseTimer) -> None:
    """Timers around `step`'s phases (a fused PipelineStep's tokenizer, model and postprocess; any step's checks).
    The step's own run is timed by the caller (StepModel), so what no phase holds is its step_other."""
    _timed(step, "check_request", timer, "check")
    for part, phase in (("tokenizer", "tokenize"), ("model", "model")):
        if hasattr(step, part):
            _timed(getattr(step, part), "run", timer, phase)
    post = getattr(step, "post", None)
    if post is not None:
        inner, watched = _innermost(post)
        _timed(post, "check", timer, "post")
        _timed(inner, "run", timer, "post")
        if watched is not None:
            _timed(watched, "_observe", timer, "watch")
