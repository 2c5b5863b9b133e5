"""The in-process rows: what this machine can do without a server. The ONNX model in onnxruntime (with and
without tokenization, and its INT8 copy), and Paddle Inference, at every batch size."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from ernie_deploy.bench.config import MIN_CALLS, BenchConfig, TaskInputs
from ernie_deploy.bench.machine import usable_cores
from ernie_deploy.bench.rows import (
    LIMIT,
    LIMIT_INT8,
    LIMIT_INT8_OPT,
    LIMIT_OPT,
    LIMIT_TOK,
    PADDLE,
    Row,
    chunks,
    mark_best,
    summarize,
    tick,
)


def _run_cell(
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
    inputs: TaskInputs, config: BenchConfig, tokenizer, progress=None, variants: dict[str, Path] | None = None
) -> list[Row]:
    """limit and limit+tok rows at every batch size, then paddle at every batch size (best one kept as the
    row shown), each model freed before the next so that no idle thread pool competes with the servers.
    `variants`: other graphs of the model by row kind (LIMIT_INT8, LIMIT_OPT, LIMIT_INT8_OPT), each timed right
    after the FP32 graph on the same batches."""
    from ernie_deploy.serving.encoding import encode_items
    from ernie_deploy.serving.runtime import OnnxModel

    task = inputs.task
    max_len = task.max_seq_len
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

            lat, seqs, wall, _ = _run_cell(run_encoded, encoded, sizes, config.inproc_duration_s, config.warmup_s)
            rows.append(summarize(Row(task.artifact_name, kind, batch), lat, seqs, wall))
            tick(progress, rows[-1])

        def run_texts(texts) -> float:
            t0 = time.perf_counter()
            enc = encode_items(tokenizer, texts, max_len)
            t1 = time.perf_counter()
            model(enc.input_ids, enc.token_type_ids)
            return t1 - t0

        lat, seqs, wall, tok = _run_cell(run_texts, batches, sizes, config.inproc_duration_s, config.warmup_s)
        row = summarize(Row(task.artifact_name, LIMIT_TOK, batch), lat, seqs, wall)
        row.tokenize_share = tok / sum(lat) if lat else None
        rows.append(row)
        tick(progress, row)
    model = sessions = None  # free the sessions (and their thread pools) before the servers run
    for kind in (LIMIT, LIMIT_INT8, LIMIT_OPT, LIMIT_INT8_OPT, LIMIT_TOK):
        mark_best([r for r in rows if r.kind == kind])
    if config.paddle and not inputs.shape:
        rows.extend(bench_paddle(inputs, config, tokenizer, progress))
    return rows


def paddle_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("paddle") is not None


def bench_paddle(inputs: TaskInputs, config: BenchConfig, tokenizer, progress=None) -> list[Row]:
    """Paddle Inference on the serving tokenizer's ids (identical to paddlenlp's), with as many math threads as
    onnxruntime gets. One row per batch size; the best is marked."""
    from ernie_deploy.serving.encoding import encode_items

    task = inputs.task
    if not paddle_available():
        row = Row(task.artifact_name, PADDLE, 0, note="skipped: paddle is not installed (pip install -e .[export])")
        tick(progress, row)
        return [row]
    from ernie_deploy.export.static import PaddlePredictor

    threads = usable_cores()
    predictor = PaddlePredictor(inputs.static, threads=threads)
    rows = []
    for batch in config.batch_sizes:
        batches = chunks(inputs.texts, batch)
        encoded = [encode_items(tokenizer, b, task.max_seq_len) for b in batches]

        def run(enc) -> float:
            predictor(enc.input_ids, enc.token_type_ids)
            return 0.0

        lat, seqs, wall, _ = _run_cell(
            run, encoded, [len(b) for b in batches], config.inproc_duration_s, config.warmup_s
        )
        rows.append(summarize(Row(task.artifact_name, PADDLE, batch, note=f"{threads} math threads"), lat, seqs, wall))
        tick(progress, rows[-1])
    predictor = None  # as above
    mark_best(rows)
    return rows


def reference_predictions(inputs: TaskInputs, texts: list[str], spec=None) -> list:
    """What the served model must answer for `texts`: in-process ONNX with the serving tokenizer and the
    postprocess logic, read as served (`spec`: the served model's record; default: the artifacts' record, as `build`
    serves it by default)."""
    from ernie_deploy.evaluate.offline import model_files, served_predictions

    labels = inputs.static.labels
    files = model_files(inputs.task, Path(inputs.onnx).parent, labels)  # a multi-label model's thresholds
    if inputs.static.ner_decoding:  # a token model's NER decoding, as export recorded it and `build` serves it
        files["decoding"] = inputs.static.ner_decoding
    spec = spec or inputs.static.spec
    return served_predictions(inputs.task, inputs.onnx, inputs.static.vocab_file, labels, texts, spec, **files)
