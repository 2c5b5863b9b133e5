"""`python -m benchmarks.uie_int8`: the demo UIE in FP32 and in static INT8, in process, in one run on one machine:
texts/s, span F1 on the test split, and whether a text's answer depends on its batch (docs/BENCHMARKS.md, "UIE in
INT8"; docs/uie-int8.json).

The shipped demo UIE (demo/uie) goes through the commands users run, twice: `ernie-deploy fetch --bootstrap`, `export`,
then `convert` (FP32) for one model and `convert --quantize int8` (calibrated on the dev split, gated on the spans of
the test split's first 256 texts) for the other, and `build --runtime python` for both. Each is then run as the server
runs it: the extraction step (serving.steps.STEPS) built from the model's own config.pbtxt and version folder, so the
same tokenizer, row buckets, onnxruntime session options and chunking, handed B one-text requests a call as Triton's
dynamic batcher hands them (`Step.run_requests`), each text with the schema the model was built with (its three entity
types), B = 1 and 8. Rounds alternate the two models cell by cell, and each cell keeps its best round (on a shared
host the same cell moves by up to 2x between rounds; the best is the least disturbed). The ratio is INT8's texts/s
over FP32's at the same B; the seconds the step spends inside its onnxruntime runs are clocked too (the model's `run`
wrapped), which gives the model's own texts/s on the same rows with the same session options, and its share of the
step.

Span F1: each model's step answers the whole test split (5,000 sentences, 16 texts a request), scored as `ernie-deploy
eval` scores it (kinds/uie/evaluate.py). Batch independence: the INT8 step answers the test split's first 400 texts
one a request, and again 16 texts a request (and in reverse order, so each text has other companions and other
padding); the spans must be the same and the largest probability difference is recorded. For contrast the same is
measured on a dynamic-INT8 copy of the FP32 model (export.precision.quantize_int8, run through serving.spans.extract
with the same reading), which `convert` refuses for extraction.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.page_uie_int8 import table
from benchmarks.scores_in_process import step_config
from benchmarks.step_timing import cell_of, time_step_calls
from ernie_deploy.bench.machine import loadavg, machine_info, package_versions, run_record
from ernie_deploy.core.errors import BadCheckpointError
from ernie_deploy.core.files import write_json
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.core.tasks import TOKENIZER_STEP, UIE
from ernie_deploy.export.precision import quantize_int8
from ernie_deploy.export.uie_int8 import Reading, chunked
from ernie_deploy.fetch.data import data_dir, read_split
from ernie_deploy.kinds.uie.evaluate import score
from ernie_deploy.serving.runtime import OnnxModel
from ernie_deploy.serving.spans import extract
from ernie_deploy.serving.steps import STEPS
from ernie_deploy.serving.tokenizer import build_tokenizer

MODELS = {"fp32": [], "int8": ["--quantize", "int8"]}  # name -> convert flags
BATCHES = (1, 8)
ROUNDS, DURATION_S, WARMUP_S = 3, 5.0, 1.0
TEXTS = 400  # distinct texts the speed cells cycle through, and the batch-independence check reads
PER_REQUEST = 16  # texts a request when scoring and when checking batch independence (rows stay under the limit)
TARGETS = {"f1_drop_points": 1.0, "speed_ratio": 1.5}


def build_models(work: Path) -> tuple[Path, dict[str, Path]]:
    """(repository, each model's ONNX folder): the demo UIE fetched, exported, converted and built per MODELS."""
    from ernie_deploy.cli import main

    artifacts = work / "artifacts"
    artifacts.mkdir(parents=True)
    (artifacts / "data").symlink_to(data_dir(UIE.dataset).parent.resolve())  # the prepared splits, not a copy
    repo = work / "models"
    before = os.environ.get("ERNIE_DEPLOY_ARTIFACTS")
    os.environ["ERNIE_DEPLOY_ARTIFACTS"] = str(artifacts)
    try:
        steps = [["fetch", "--bootstrap", "--task", "uie"]]
        for name, flags in MODELS.items():
            model = f"uie_{name}"
            steps += [
                ["export", "--task", "uie", "--model", model, "--checkpoint", str(artifacts / "checkpoints" / "uie")],
                ["convert", "--model", model, *flags],
                ["build", "--model", model, "-r", str(repo), "--runtime", "python"],
            ]
        for argv in steps:
            if main(argv) != 0:
                raise BadCheckpointError(f"`ernie-deploy {' '.join(argv)}` failed", "read its message above")
    finally:
        if before is None:
            os.environ.pop("ERNIE_DEPLOY_ARTIFACTS", None)
        else:
            os.environ["ERNIE_DEPLOY_ARTIFACTS"] = before
    return repo, {name: artifacts / "onnx" / f"uie_{name}" for name in MODELS}


def load_step(repo: Path, name: str):
    """The step the server runs for model `name`, built as the python backend builds it."""
    from ernie_deploy.repository.layouts import get_layout

    model = ModelSpec.read(repo / name / "1")
    step = get_layout(model.layout).python_steps(model, TOKENIZER_STEP, "python")[name]
    return STEPS[step](step_config(repo / name), repo / name / "1")


def _request(texts: list[str]) -> dict:
    return {"text": np.array([[t.encode("utf-8")] for t in texts], dtype=np.object_)}


def answers(step, texts: list[str], per_request: int, merged: int = 1) -> list[dict]:
    """Each text's answer: `per_request` texts a request, `merged` requests a step call."""
    requests = [_request(texts[i : i + per_request]) for i in range(0, len(texts), per_request)]
    out = []
    for at in range(0, len(requests), merged):
        for got in step.run_requests(requests[at : at + merged]):
            if not isinstance(got, dict):
                raise got
            out += [json.loads(item) for item in got["result"].reshape(-1)]
    return out


def compare(alone: list[dict], other: list[dict]) -> dict:
    """Texts whose spans differ between two readings of the same texts, and the largest probability difference of a
    span both found."""
    differ, worst = 0, 0.0
    for a, b in zip(alone, other):
        spans_a = {(k, s["start"], s["end"]): s["probability"] for k, v in a.items() for s in v}
        spans_b = {(k, s["start"], s["end"]): s["probability"] for k, v in b.items() for s in v}
        differ += spans_a.keys() != spans_b.keys()
        worst = max([worst, *(abs(spans_a[k] - spans_b[k]) for k in spans_a.keys() & spans_b.keys())])
    return {"texts": len(alone), "texts_with_other_spans": differ, "max_abs_probability_diff": worst}


def batch_independence(step, texts: list[str]) -> dict:
    alone = answers(step, texts, 1)
    return {
        "alone_vs_16_a_request": compare(alone, answers(step, texts, PER_REQUEST)),
        "alone_vs_16_reversed": compare(alone, answers(step, texts[::-1], PER_REQUEST)[::-1]),
        "alone_vs_8_requests_merged": compare(alone, answers(step, texts, 1, merged=8)),
    }


def dynamic_contrast(folder: Path, texts: list[str], work: Path) -> dict:
    """The same check on a dynamic-INT8 copy of the FP32 model, in process (serving.spans.extract)."""

    spec = ModelSpec.read(folder)
    reading = Reading.of(spec)
    quantize_int8(folder / "model.fp32.onnx", work / "dynamic.onnx")
    run = chunked(OnnxModel(work / "dynamic.onnx", outputs=UIE.kind_facts.model_outputs))
    vocab = folder.parent.parent / "static" / folder.name / "vocab.txt"  # artifacts/static/<name>, beside onnx/<name>
    tokenizer = build_tokenizer(vocab, lowercase=spec.do_lower_case)

    def read(batch):
        return extract(tokenizer, batch, reading.schema, run, max_seq_len=reading.row_tokens, stride=reading.stride)

    alone = [read([t])[0] for t in texts]
    together = [a for i in range(0, len(texts), PER_REQUEST) for a in read(texts[i : i + PER_REQUEST])]
    return {"alone_vs_16_a_request": compare(alone, together)}


def span_f1(step, texts: list[str], gold: list, labels: list[str]) -> dict:
    started = time.perf_counter()
    report = score(texts, gold, answers(step, texts, PER_REQUEST), labels)
    return {k: report[k] for k in ("span_f1", "precision", "recall", "n", "spans")} | {
        "seconds": time.perf_counter() - started
    }


class ModelClock:
    """The seconds the step spends in its onnxruntime runs (the model's `run`, wrapped): the model's own share of the
    step, on the rows the step builds, with the session options the server uses."""

    def __init__(self, step):
        while not hasattr(step, "_run"):  # the extraction step itself, or the one a watch wraps
            step = step.step
        self.seconds, run = 0.0, step.model.run

        def timed(*args):
            started = time.perf_counter()
            try:
                return run(*args)
            finally:
                self.seconds += time.perf_counter() - started

        step.model.run = timed


def speed(steps: dict, texts: list[str], *, rounds: int, duration_s: float, warmup_s: float) -> list[dict]:
    requests = [_request([t]) for t in texts]
    clocks = {name: ModelClock(step) for name, step in steps.items()}
    rows = []
    for round_ in range(rounds):
        for batch in BATCHES:
            for name, step in steps.items():
                time_step_calls(step, requests, batch, warmup_s, 0.0)  # the warm-up, outside the model's clock
                clocks[name].seconds = 0.0
                cell = cell_of(*time_step_calls(step, requests, batch, duration_s, 0.0))
                cell["model_s"] = clocks[name].seconds
                cell["model_texts_per_s"] = cell["texts"] / cell["model_s"]
                rows.append({"model": name, "batch": batch, "round": round_, **cell})
                print(
                    f"round {round_} {name} b{batch}: {cell['texts_per_s']:7.1f} texts/s, p50 {cell['p50_ms']:.2f} "
                    f"ms, in the model {cell['model_s'] / cell['seconds']:.0%}, load average {cell['load_average']}",
                    flush=True,
                )
    return rows


def best(rows: list[dict]) -> list[dict]:
    kept: dict = {}
    for r in rows:
        key = (r["model"], r["batch"])
        if key not in kept or r["texts_per_s"] > kept[key]["texts_per_s"]:
            kept[key] = r
    return list(kept.values())


def ratios(kept: list[dict], key: str = "texts_per_s") -> dict:
    """INT8's `key` over FP32's at each B (texts_per_s: the step's; model_texts_per_s: its onnxruntime runs')."""
    by = {(r["model"], r["batch"]): r[key] for r in kept}
    return {f"b{b}": by[("int8", b)] / by[("fp32", b)] for b in BATCHES}


def run(out: Path | None, *, rounds: int = ROUNDS, duration_s: float = DURATION_S) -> dict:
    machine = machine_info()  # now: its load average is the one at the start
    started = time.perf_counter()
    test_texts, gold = read_split(data_dir(UIE.dataset), "test", UIE.split_format)
    texts = test_texts[:TEXTS]
    with tempfile.TemporaryDirectory(prefix="ernie-deploy-uie-int8-") as work:
        repo, folders = build_models(Path(work))
        conversion = {
            name: json.loads((folder / "parity.json").read_text(encoding="utf-8")) for name, folder in folders.items()
        }
        steps = {name: load_step(repo, f"uie_{name}") for name in MODELS}
        try:
            labels = list(ModelSpec.read(repo / "uie_fp32" / "1").labels)
            rows = speed(steps, texts, rounds=rounds, duration_s=duration_s, warmup_s=WARMUP_S)
            scores = {name: span_f1(step, test_texts, gold, labels) for name, step in steps.items()}
            independence = {
                "int8-static": batch_independence(steps["int8"], texts),
                "int8-dynamic (in process, for contrast)": dynamic_contrast(folders["int8"], texts, Path(work)),
            }
        finally:
            for step in steps.values():
                step.close()
    kept = best(rows)
    record = {
        **run_record(rows),
        "machine": machine,
        "loadavg_end": loadavg(),
        "versions": package_versions(),
        "model": "demo/uie (2 x 256, FFN 512), rows of its trained 33 tokens, schema 人名 / 地名 / 机构名",
        "texts": {"speed": f"MSRA NER test split, first {len(texts)} sentences", "scores": "MSRA NER test split"},
        "cells": {"rounds": rounds, "duration_s": duration_s, "warmup_s": WARMUP_S, "batches": list(BATCHES)},
        "int8_gate": conversion["int8"]["int8"],
        "best": kept,
        "ratios": ratios(kept),
        "model_ratios": ratios(kept, "model_texts_per_s"),
        "span_f1": scores,
        "f1_drop_points": 100 * (scores["fp32"]["span_f1"] - scores["int8"]["span_f1"]),
        "batch_independence": independence,
        "targets": TARGETS,
        "seconds": time.perf_counter() - started,
    }
    if out is not None:
        write_json(record, out)
    print(render(record))
    return record


def render(record: dict) -> str:
    """The page's table (benchmarks/page_uie_int8.py renders the same from the results file)."""
    return table(record)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.uie_int8", description=__doc__.split("\n\n")[0], allow_abbrev=False
    )
    p.add_argument("--out", default="docs/uie-int8.json", help="the results file (default docs/uie-int8.json)")
    p.add_argument("--rounds", type=int, default=ROUNDS, help=f"rounds of every cell (default {ROUNDS})")
    p.add_argument("--duration", type=float, default=DURATION_S, help=f"seconds per cell (default {DURATION_S})")
    args = p.parse_args(argv)
    run(Path(args.out), rounds=args.rounds, duration_s=args.duration)
    return 0


if __name__ == "__main__":
    sys.exit(main())
