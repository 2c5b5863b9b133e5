"""The baseline of the UIE bench (benchmarks/uie.py): the same exported static model run the way Taskflow runs it on a
CPU, in process. What Taskflow does there (paddlenlp 2.8.1, taskflow/task.py and taskflow/information_extraction.py,
read for its settings): Paddle Inference with MKL-DNN on; a text longer than a row cut into pieces that fill rows of
max_seq_len tokens (one row for any text that fits), every row padded to max_seq_len; rows in batches of 16. Taskflow
gives Paddle half the machine's cores by default; here it gets as many as onnxruntime does
(bench.machine.usable_cores), so the baseline is not handicapped.

The stages and span decoding are this project's (serving.spans.extract, which reads spans as Taskflow does:
tests/test_spans.py), so the two sides differ only in how the texts become model rows and how the rows run: the served
step reads a text in the windows its record names (at most max_seq_len, often shorter for a model trained on short
texts), packed in length buckets. paddlenlp 2.8.1's Taskflow itself cannot run here: it loads a static model as
inference.pdmodel, and paddle 3.3.1 exports inference.json."""

from __future__ import annotations

import json

import numpy as np

from benchmarks.step_timing import cell_of, time_step_calls
from benchmarks.uie_model import extraction_step, request, spans_of
from ernie_deploy.bench.machine import usable_cores
from ernie_deploy.export.static import PaddlePredictor, StaticModel
from ernie_deploy.serving.schema import parse_schema
from ernie_deploy.serving.spans import extract

# The way of Taskflow's engine's cells in the bench's rows.
TASKFLOW = "taskflow"
# Taskflow's UIE batch size (rows a Paddle Inference run) and that every row is padded to max_seq_len.
TASKFLOW_BATCH = 16


class TaskflowEngine:
    """`run_requests` as a served step's (bench step_timing.time_step_calls drives it): one-text requests of text
    and schema, answered by extract() over Paddle Inference runs of TASKFLOW_BATCH rows of max_seq_len tokens."""

    def __init__(self, static_root, step, threads: int | None = None):
        static = StaticModel.load(static_root)
        self.threads = threads or usable_cores()
        # Not enable_memory_optim(), which Taskflow also sets: paddle 3.3.1's predictor over a PIR model
        # (inference.json) refuses it ("Not find ... memory_optimize_pass"); it saves memory, not time.
        self.predictor = PaddlePredictor(static, threads=self.threads, mkldnn=True)
        self.step = step  # the served step: its tokenizer and threshold, read not run
        self.max_seq_len = static.max_seq_len
        self.rows = 0

    def _run(self, rows):
        width = self.max_seq_len
        ids = np.zeros((len(rows), width), dtype=np.int64)  # the vocabulary's [PAD] is id 0, as the rows pad
        types = np.zeros((len(rows), width), dtype=np.int64)
        ids[:, : rows.input_ids.shape[1]] = rows.input_ids
        types[:, : rows.token_type_ids.shape[1]] = rows.token_type_ids
        runs = [
            self.predictor.run(ids[i : i + TASKFLOW_BATCH], types[i : i + TASKFLOW_BATCH])
            for i in range(0, len(rows), TASKFLOW_BATCH)
        ]
        self.rows += len(rows)
        return np.concatenate([r[0] for r in runs]), np.concatenate([r[1] for r in runs])

    def run_requests(self, requests: list[dict]) -> list[dict]:
        texts = [r["text"].reshape(-1)[0].decode("utf-8") for r in requests]
        schemas = [parse_schema(json.loads(r["schema"].reshape(-1)[0])) for r in requests]
        answers = extract(
            self.step.tokenizer,
            texts,
            schemas,
            self._run,
            max_seq_len=self.max_seq_len,
            # Pieces one after another, not overlapping windows: a stride past a row's text part is read as the text
            # part (serving.spans.prompt_rows).
            stride=self.max_seq_len,
            position_prob=self.step.position_prob,
        )
        return [{"result": a} for a in answers]


def time_taskflow(engine: TaskflowEngine, texts: list[str], schema: str, duration_s: float, warmup_s: float) -> dict:
    """Taskflow's engine given TASKFLOW_BATCH texts a call (as a user hands Taskflow a list; fewer when `texts` are
    fewer), over `texts`."""
    requests = [request(t, schema) for t in texts]
    return cell_of(*time_step_calls(engine, requests, min(TASKFLOW_BATCH, len(texts)), duration_s, warmup_s))


def taskflow_agrees(engine: TaskflowEngine, step, texts: list[str], schema: str) -> dict:
    """How many of `texts` Taskflow's engine (Paddle Inference) answers with the served step's spans: the baseline
    computes what is served, up to the two runtimes' float error; and the rows a text each reads them in (the served
    step in its record's windows, Taskflow's engine in rows of max_seq_len)."""
    ours = step.run_requests([request(t, schema) for t in texts])
    before = engine.rows
    theirs = engine.run_requests([request(t, schema) for t in texts])
    same = sum(
        [a[:3] for a in spans_of(json.loads(o["result"][0][0]))] == [b[:3] for b in spans_of(t["result"])]
        for o, t in zip(ours, theirs)
    )
    inner = extraction_step(step)
    return {
        "texts": len(texts),
        "same_spans": same,
        "taskflow_rows_per_text": (engine.rows - before) / len(texts),
        "window_tokens": inner.row_tokens,
        "max_seq_len": engine.max_seq_len,
    }
