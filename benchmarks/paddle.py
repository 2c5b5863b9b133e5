"""The Paddle Inference rows: the static model in-process at every batch size, next to onnxruntime's limit rows
(ernie_deploy.bench.inprocess), on the same ids and cells."""

from __future__ import annotations

from ernie_deploy.bench.config import BenchConfig
from ernie_deploy.bench.inprocess import run_cell
from ernie_deploy.bench.machine import usable_cores
from ernie_deploy.bench.rows import PADDLE, Row, chunks, mark_best, summarize, tick
from ernie_deploy.evaluate.inputs import ModelInputs
from ernie_deploy.export.static import PaddlePredictor
from ernie_deploy.serving.encoding import encode_items


def paddle_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("paddle") is not None


def bench_paddle(inputs: ModelInputs, config: BenchConfig, tokenizer, progress=None) -> list[Row]:
    """Paddle Inference on the serving tokenizer's ids (identical to paddlenlp's), with as many math threads as
    onnxruntime gets. One row per batch size; the best is marked."""

    name = inputs.model.artifact_name
    if not paddle_available():
        row = Row(name, PADDLE, 0, note="skipped: paddle is not installed (pip install -e .[export])")
        tick(progress, row)
        return [row]

    threads = usable_cores()
    predictor = PaddlePredictor(inputs.static, threads=threads)
    rows = []
    for batch in config.batch_sizes:
        batches = chunks(inputs.texts, batch)
        encoded = [encode_items(tokenizer, b, inputs.model.max_seq_len) for b in batches]

        def run(enc) -> float:
            predictor(enc.input_ids, enc.token_type_ids)
            return 0.0

        lat, seqs, wall, _ = run_cell(
            run, encoded, [len(b) for b in batches], config.inproc_duration_s, config.warmup_s
        )
        rows.append(summarize(Row(name, PADDLE, batch, note=f"{threads} math threads"), lat, seqs, wall))
        tick(progress, rows[-1])
    predictor = None  # freed before the servers run: no idle thread pool competes with them
    mark_best(rows)
    return rows
