"""`ernie-deploy bench`: a served model timed against its in-process limit, on this machine. The ONNX model in
onnxruntime in-process (bench/inprocess.py) is the most this machine can do with it; then the model is served by a
real tritonserver, as `build` builds it by default or as a given repository serves it, its answers checked against
in-process ONNX, and every served cell loaded by each load generator in turn (bench/server_rows.py). The results
(bench.json) and their report (bench.md, bench/summary.py) are written into artifacts/reports/bench/ or a folder given.

Every number the report divides was measured in the same run, the in-process rows before the server starts.
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

from ernie_deploy.bench.config import SCHEMA, BenchConfig
from ernie_deploy.bench.inprocess import bench_inprocess
from ernie_deploy.bench.machine import command_line, loadavg, machine_info, package_versions, utc_stamp
from ernie_deploy.bench.perf_analyzer import PERF_ANALYZER, PYTHON, perf_analyzer_version, require_perf_analyzer
from ernie_deploy.bench.rows import asdict_rows, total_errors
from ernie_deploy.bench.server_rows import bench_server
from ernie_deploy.bench.summary import summary
from ernie_deploy.core.errors import BadOptionsError, FailedRequestsError
from ernie_deploy.core.files import atomic_path, write_json
from ernie_deploy.core.paths import artifacts_dir
from ernie_deploy.evaluate.inputs import ModelInputs, reference_predictions
from ernie_deploy.repository.options import BuildOptions
from ernie_deploy.serving.tokenizer import build_tokenizer


def reports_dir() -> Path:
    """Where `ernie-deploy bench` writes unless told: artifacts/reports/bench (never the working folder's docs/)."""
    return artifacts_dir() / "reports" / "bench"


def build_layout(inputs: list[ModelInputs], out: Path, **options) -> Path:
    """The project's own `build`, runtime "python" (what a pip-only machine serves), into `out`, with these
    BuildOptions (everything else at its default), each model read from its record as `build` reads it."""
    from ernie_deploy.repository.build import build, model_artifacts

    # each model as its record says, under the name the benchmark calls it by
    entries = [model_artifacts(i.static, Path(i.onnx), i.name) for i in inputs]
    build(entries, out, BuildOptions(runtime="python", **options))
    return out


def checked_config(inputs: list[ModelInputs], config: BenchConfig) -> BenchConfig:
    """Refuse what cannot be benchmarked; the config with perf_analyzer's binary found where it is asked for."""
    if not inputs:
        raise BadOptionsError("no task to benchmark", "pass --task or --model")
    unknown = set(config.load_generators) - {PYTHON, PERF_ANALYZER}
    if unknown or not config.load_generators:
        raise BadOptionsError(
            f"unknown load generators {sorted(unknown)}", f"use {PYTHON!r}, {PERF_ANALYZER!r} or both"
        )
    if PERF_ANALYZER in config.load_generators and not config.perf_analyzer:
        config = dataclasses.replace(config, perf_analyzer=require_perf_analyzer())
    return config


def results_header(inputs: list[ModelInputs], config: BenchConfig, started: float, command: str | None) -> dict:
    """bench.json before any row: when, where, with what and on what the benchmark runs."""
    results = {
        "schema": SCHEMA,
        "date": utc_stamp(started),
        "command": command or command_line(),
        "machine": machine_info(),
        "versions": package_versions(),
        "settings": {
            **dataclasses.asdict(config),
            # what the gRPC wire was (the files' paths mean nothing on another machine)
            "grpc_tls": config.grpc_tls.describe() if config.grpc_tls else None,
            "tls": config.tls.describe() if config.tls else None,
            "ort_threads": os.environ.get("ERNIE_DEPLOY_ORT_THREADS") or "onnxruntime default",
        },
        "tasks": {i.model.artifact_name: {"texts": len(i.texts), "max_seq_len": i.model.max_seq_len} for i in inputs},
        "servers": {},
        "rows": [],
    }
    if config.perf_analyzer and PERF_ANALYZER in config.load_generators:
        results["versions"]["perf_analyzer"] = perf_analyzer_version(config.perf_analyzer)
    return results


def served_cells(config: BenchConfig) -> int:
    """The served cells of one model on one layout: each load generator at each concurrency, one text per request
    and, where the client batch is above 1, that many."""
    return len(config.load_generators) * len(config.concurrency) * (2 if config.client_batch > 1 else 1)


def finish(results: dict, started: float) -> dict:
    """The run's totals: its time, the load after it and the failed requests."""
    results["seconds"] = round(time.time() - started, 1)
    results["machine"]["loadavg_end"] = loadavg()
    results["errors"] = total_errors(results)
    return results


def run_bench(
    inputs: list[ModelInputs],
    config: BenchConfig = BenchConfig(),
    *,
    repository: str | Path | None = None,
    workdir: str | Path | None = None,
    command: str | None = None,
) -> dict:
    """Every model's in-process rows, then its served rows on `repository` (default: the models built by default
    into `workdir`, a temporary folder unless given); returns the results (what bench.json holds)."""
    import tempfile

    from tqdm import tqdm

    config = checked_config(inputs, config)
    started = time.time()
    results = results_header(inputs, config, started, command)
    cells = len(inputs) * (2 * len(config.batch_sizes) + served_cells(config))
    with tempfile.TemporaryDirectory(prefix="ernie-deploy-bench-") as own:
        work = Path(workdir or own)
        work.mkdir(parents=True, exist_ok=True)
        with tqdm(total=cells, desc="bench", unit="cell", disable=not config.progress) as progress:
            references = {}
            for item in inputs:
                name = item.model.artifact_name
                references[name] = reference_predictions(item, item.texts[: config.check_texts])
                tokenizer = build_tokenizer(item.static.vocab_file)
                results["rows"].extend(asdict_rows(bench_inprocess(item, config, tokenizer, progress)))
            repo = Path(repository) if repository else build_layout(inputs, work / "served_models", layout="auto")
            info, rows = bench_server(repo, "served", inputs, config, references, work, progress)
            info["built"] = not repository
            results["servers"]["served"] = info
            results["rows"].extend(asdict_rows(rows))
    return finish(results, started)


def run_and_write(
    inputs: list[ModelInputs], config: BenchConfig, out: Path | None = None, *, repository: str | Path | None = None
) -> dict:
    """`ernie-deploy bench`: measure, write bench.json and bench.md into `out` (default artifacts/reports/bench),
    print the report. Failed requests raise, after everything is written."""
    results = run_bench(inputs, config, repository=repository)
    out = Path(out or reports_dir())
    out.mkdir(parents=True, exist_ok=True)
    text = summary(results)
    with atomic_path(out / "bench.md", suffix=".md") as tmp:
        tmp.write_text(text + "\n", encoding="utf-8")
    written = [write_json(results, out / "bench.json"), out / "bench.md"]
    print()
    print(text)
    print()
    for path in written:
        print(f"wrote {path}")
    if results["errors"]:
        raise FailedRequestsError(
            f"{results['errors']} requests failed during the benchmark",
            f"read the server log named in {out / 'bench.json'}; the numbers of this run are not valid",
        )
    return results
