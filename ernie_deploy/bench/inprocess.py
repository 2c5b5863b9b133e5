"""The in-process rows: what this machine can do without a server. The ONNX model in onnxruntime, with and without
tokenization, at every batch size (and, where given, other graphs of it on the same batches)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from ernie_deploy.bench.config import MIN_CALLS, BenchConfig
from ernie_deploy.bench.rows import (
    LIMIT,
    LIMIT_INT8,
    LIMIT_INT8_OPT,
    LIMIT_OPT,
    LIMIT_TOK,
    Row,
    chunks,
    mark_best,
    summarize,
    tick,
)
from ernie_deploy.evaluate.inputs import ModelInputs
from ernie_deploy.serving.encoding import encode_items
from ernie_deploy.serving.runtime import OnnxModel


def run_cell(
    step: Callable[[object], float], items: Sequence, sizes: Sequence[int], duration_s: float, warmup_s: float
) -> tuple[list[float], int, float, float]:
    """Call step(item) back to back over items (cycling): warm-up, then at least `duration_s` and MIN_CALLS
    calls. step returns the seconds of the call spent tokenizing. Returns (latencies, sequences, wall,
    tokenize seconds)."""
    i = 0
    warm_until = time.perf_counter() + warmup_s
    while True:
        step(items[i % len(items)])
        i += 1
        if time.perf_counter() >= warm_until:
            break
    latencies, sequences, tokenize = [], 0, 0.0
    start = time.perf_counter()
    deadline = start + duration_s
    while True:
        k = i % len(items)
        t0 = time.perf_counter()
        tokenize += step(items[k])
        t1 = time.perf_counter()
        latencies.append(t1 - t0)
        sequences += sizes[k]
        i += 1
        if t1 >= deadline and len(latencies) >= MIN_CALLS:
            return latencies, sequences, t1 - start, tokenize


def bench_inprocess(
    inputs: ModelInputs, config: BenchConfig, tokenizer, progress=None, variants: dict[str, Path] | None = None
) -> list[Row]:
    """limit and limit+tok rows at every batch size (the best batch size of each marked), each model freed after so
    that no idle thread pool competes with the servers.
    `variants`: other graphs of the model by row kind (LIMIT_INT8, LIMIT_OPT, LIMIT_INT8_OPT), each timed right
    after the FP32 graph on the same batches."""

    name = inputs.model.artifact_name
    max_len = inputs.model.max_seq_len
    rows: list[Row] = []
    model = OnnxModel(inputs.onnx)
    sessions = [(LIMIT, model)] + [(kind, OnnxModel(path)) for kind, path in (variants or {}).items()]
    for batch in config.batch_sizes:
        batches = chunks(inputs.texts, batch)
        sizes = [len(b) for b in batches]
        encoded = [encode_items(tokenizer, b, max_len) for b in batches]  # once: tokenization excluded

        # The variants' cells right after the FP32 cell, on the same batches, so that they see the same machine.
        for kind, session in sessions:

            def run_encoded(enc, session=session) -> float:
                session(enc.input_ids, enc.token_type_ids)
                return 0.0

            lat, seqs, wall, _ = run_cell(run_encoded, encoded, sizes, config.inproc_duration_s, config.warmup_s)
            rows.append(summarize(Row(name, kind, batch), lat, seqs, wall))
            tick(progress, rows[-1])

        def run_texts(texts) -> float:
            t0 = time.perf_counter()
            enc = encode_items(tokenizer, texts, max_len)
            t1 = time.perf_counter()
            model(enc.input_ids, enc.token_type_ids)
            return t1 - t0

        lat, seqs, wall, tok = run_cell(run_texts, batches, sizes, config.inproc_duration_s, config.warmup_s)
        row = summarize(Row(name, LIMIT_TOK, batch), lat, seqs, wall)
        row.tokenize_share = tok / sum(lat) if lat else None
        rows.append(row)
        tick(progress, row)
    model = sessions = None  # free the sessions (and their thread pools) before the servers run
    for kind in (LIMIT, LIMIT_INT8, LIMIT_OPT, LIMIT_INT8_OPT, LIMIT_TOK):
        mark_best([r for r in rows if r.kind == kind])
    return rows
