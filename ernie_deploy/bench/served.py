"""The whole benchmark: the in-process rows, then each served layout built, served by a real tritonserver and
loaded, one server at a time (bench/server_rows.py), then the peer (PaddleNLP SimpleServing, bench/peer_rows.py); the
results, their files and the report.

Servers run one at a time (a second would share the cores), and every number that a ratio divides was
measured in the same run.
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

from ernie_deploy.bench.config import SCHEMA, BenchConfig, TaskInputs
from ernie_deploy.bench.inprocess import (
    bench_inprocess,
    paddle_available,
    reference_predictions,
)
from ernie_deploy.bench.machine import (
    command_line,
    loadavg,
    machine_info,
    package_versions,
    utc_stamp,
)
from ernie_deploy.bench.peer_rows import bench_peer
from ernie_deploy.bench.perf_analyzer import (
    PERF_ANALYZER,
    PYTHON,
    perf_analyzer_version,
    require_perf_analyzer,
)
from ernie_deploy.bench.report import report, write_outputs
from ernie_deploy.bench.rows import (
    LIMIT_INT8,
    LIMIT_INT8_OPT,
    LIMIT_OPT,
    asdict_rows,
    total_errors,
)
from ernie_deploy.bench.server_rows import bench_server
from ernie_deploy.bench.targets import compute_ratios
from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.files import write_json
from ernie_deploy.peer.server import peer_available


def build_layout(inputs: list[TaskInputs], out: Path, **options) -> Path:
    """The project's own `build`, runtime "python" (what a pip-only machine serves), into `out`, with these
    BuildOptions (everything else at its default), each model read from its record as `build` reads it."""
    from ernie_deploy.repository.build import build, model_artifacts
    from ernie_deploy.repository.options import BuildOptions

    # each model as its record says, under the name the benchmark calls it by
    entries = [model_artifacts(i.static, Path(i.onnx), i.task.ensemble) for i in inputs]
    build(entries, out, BuildOptions(runtime="python", **options))
    return out


def build_repository(inputs: list[TaskInputs], out: Path, layout: str = "served") -> Path:
    """A layout into `out`: "served" (the default build: each model the layout `build` gives it with none named),
    "classic" (the ensemble's fixed-shape baseline), or any layout's name (repository/layouts)."""
    if layout == "served":
        return build_layout(inputs, out, layout="auto")
    if layout == "classic":
        return build_layout(inputs, out, classic=True)
    return build_layout(inputs, out, layout=layout)


def model_variants(item: TaskInputs, workdir: Path) -> dict[str, Path]:
    """The model's other graphs timed in-process beside it, by row kind: INT8 (`convert --quantize int8`), optimized
    (`convert --optimize`) and optimized then INT8, written into `workdir`."""
    from ernie_deploy.export.optimize import optimize_transformer
    from ernie_deploy.export.precision import quantize_int8

    name = item.task.artifact_name
    paths = {kind: workdir / f"{name}_{kind}.onnx" for kind in (LIMIT_INT8, LIMIT_OPT, LIMIT_INT8_OPT)}
    quantize_int8(item.onnx, paths[LIMIT_INT8])
    optimize_transformer(item.onnx, paths[LIMIT_OPT])
    quantize_int8(paths[LIMIT_OPT], paths[LIMIT_INT8_OPT])
    return paths


def _cells(inputs: list[TaskInputs], config: BenchConfig) -> int:
    tools = len(config.load_generators)
    with_peer = config.peer and peer_available()
    cells = 0
    for item in inputs:
        full = item.shape is None  # a sized model gets the limits, served and ensemble rows only
        paddle = (len(config.batch_sizes) if paddle_available() else 1) if config.paddle and full else 0
        served = tools * len(config.concurrency) * (2 if config.client_batch > 1 else 1)
        others = tools * len(config.concurrency) * (int(config.classic and full) + int(config.ensemble))
        peer = len(config.concurrency) * (2 if config.client_batch > 1 else 1) if full and with_peer else 0
        cells += (2 + 3 * int(config.int8 and full)) * len(config.batch_sizes) + paddle + served + others + peer
    return cells


def _checked_config(inputs: list[TaskInputs], config: BenchConfig) -> BenchConfig:
    """Refuse what cannot be benchmarked; the config with perf_analyzer's binary found where it is asked for."""
    if not inputs:
        raise ErnieDeployError("no task to benchmark")
    unknown = set(config.load_generators) - {PYTHON, PERF_ANALYZER}
    if unknown or not config.load_generators:
        raise ErnieDeployError(
            f"unknown load generators {sorted(unknown)}", f"use {PYTHON!r}, {PERF_ANALYZER!r} or both"
        )
    if PERF_ANALYZER in config.load_generators and not config.perf_analyzer:
        config = dataclasses.replace(config, perf_analyzer=require_perf_analyzer())
    return config


def _with_sizes(inputs: list[TaskInputs], config: BenchConfig, sizes_root: str | Path | None) -> list[TaskInputs]:
    """The inputs and, unless they already are sized models, the first model remade in each of `config.sizes`."""
    if config.sizes and not any(i.shape for i in inputs):
        from ernie_deploy.bench.sizes import prepare_sizes

        log = print if config.progress else (lambda line: None)
        inputs = [*inputs, *prepare_sizes(inputs, config.sizes, Path(sizes_root) if sizes_root else None, log)]
    return inputs


def _results_header(inputs: list[TaskInputs], config: BenchConfig, started: float, command: str | None) -> dict:
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
        "tasks": {
            i.task.artifact_name: {
                "texts": len(i.texts),
                "max_seq_len": i.task.max_seq_len,
                **({"shape": i.shape} if i.shape else {}),
            }
            for i in inputs
        },
        "servers": {},
        "rows": [],
    }
    if config.perf_analyzer and PERF_ANALYZER in config.load_generators:
        results["versions"]["perf_analyzer"] = perf_analyzer_version(config.perf_analyzer)
    return results


def _inprocess_rows(
    inputs: list[TaskInputs], config: BenchConfig, tokenizers: dict, workdir: Path, progress, results: dict
) -> dict:
    """Each task's in-process rows into `results`; returns the in-process predictions the servers are checked
    against, by task."""
    references = {}
    for item in inputs:
        tokenizer = tokenizers[item.task.artifact_name]
        references[item.task.artifact_name] = reference_predictions(item, item.texts[: config.check_texts])
        variants = model_variants(item, workdir) if config.int8 and not item.shape else {}
        results["rows"].extend(asdict_rows(bench_inprocess(item, config, tokenizer, progress, variants)))
    return references


def _server_rows(
    inputs: list[TaskInputs],
    config: BenchConfig,
    references: dict,
    workdir: Path,
    progress,
    results: dict,
    repositories: dict[str, str | Path | None],
) -> None:
    """Each layout's server (the given repository, or one built into `workdir`), then the peer, one at a time, their
    facts and rows into `results`."""
    plans = [("served", repositories["served"])]
    if config.ensemble:
        plans.append(("ensemble", None))
    if config.classic:
        plans.append(("classic", repositories["classic"]))
    for name, given in plans:
        # The classic layout is the demo models' baseline; the sized models are not measured in it.
        served = [i for i in inputs if name != "classic" or not i.shape]
        repo = Path(given) if given else build_repository(served, workdir / f"{name}_models", name)
        info, rows = bench_server(repo, name, served, config, references, workdir, progress)
        info["built"] = not given
        results["servers"][name] = info
        results["rows"].extend(asdict_rows(rows))
    if config.peer and peer_available():
        # The peer serves the demo models' static exports; the sized models are not measured against it.
        info, rows = bench_peer([i for i in inputs if not i.shape], config, workdir, progress)
        results["servers"]["peer"] = info
        results["rows"].extend(asdict_rows(rows))


def _summarize(results: dict, started: float) -> dict:
    """The run's totals: its time, the load after it, the ratios between rows and the failed requests."""
    results["seconds"] = round(time.time() - started, 1)
    results["machine"]["loadavg_end"] = loadavg()
    results["ratios"] = compute_ratios(results)
    results["errors"] = total_errors(results)
    return results


def run_benchmark(
    inputs: list[TaskInputs],
    config: BenchConfig = BenchConfig(),
    *,
    repository: str | Path | None = None,
    classic_repository: str | Path | None = None,
    workdir: str | Path | None = None,
    command: str | None = None,
    sizes_root: str | Path | None = None,
) -> dict:
    """Measure every row for every task, and for the first task's model remade in each of `config.sizes`
    (made in `sizes_root`, default artifacts/sizes, and reused from there); returns the results (what bench.json
    holds)."""
    import tempfile

    from tqdm import tqdm

    from ernie_deploy.serving.tokenizer import build_tokenizer

    config = _checked_config(inputs, config)
    started = time.time()
    own_workdir = None
    if workdir is None:
        own_workdir = tempfile.TemporaryDirectory(prefix="ernie-deploy-bench-")
        workdir = own_workdir.name
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    inputs = _with_sizes(inputs, config, sizes_root)
    tokenizers = {i.task.artifact_name: build_tokenizer(i.static.vocab_file) for i in inputs}
    results = _results_header(inputs, config, started, command)
    progress = tqdm(total=_cells(inputs, config), desc="bench", unit="cell", disable=not config.progress)
    try:
        references = _inprocess_rows(inputs, config, tokenizers, workdir, progress, results)
        repositories = {"served": repository, "classic": classic_repository}
        _server_rows(inputs, config, references, workdir, progress, results, repositories)
    finally:
        progress.close()
        if own_workdir is not None:
            own_workdir.cleanup()
    return _summarize(results, started)


def run_and_write(
    inputs: list[TaskInputs],
    config: BenchConfig,
    out: Path,
    *,
    plot_png: bool = True,
    repository: str | Path | None = None,
    classic_repository: str | Path | None = None,
) -> dict:
    """`ernie-deploy bench`: measure, write bench.json, BENCHMARKS.md and bench.png (unless not `plot_png`) in
    `out`, print the report. Failed requests raise, after everything is written."""
    results = run_benchmark(inputs, config, repository=repository, classic_repository=classic_repository)
    out.mkdir(parents=True, exist_ok=True)
    written = [write_json(results, out / "bench.json"), *write_outputs(results, out, plot_png)]
    print()
    for path in written:
        print(f"wrote {path}")
    print()
    print(report(results))
    if results["errors"]:
        raise ErnieDeployError(
            f"{results['errors']} requests failed during the benchmark",
            "read the server logs named in bench.json; the numbers of this run are not valid",
        )
    return results
