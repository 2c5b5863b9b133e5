"""The repository's whole benchmark (`bash scripts/bench.sh`): the in-process rows (onnxruntime, its INT8 and optimized
graphs, Paddle Inference), then each served layout built, served by a real tritonserver and loaded, one server at a
time (ernie_deploy.bench.server_rows), then the peer (PaddleNLP SimpleServing, benchmarks/peer_rows.py), beside the
classifier remade in ERNIE 3.0 shapes; the results, docs/BENCHMARKS.md, the plots and the report.

Servers run one at a time (a second would share the cores), and every number that a ratio divides was
measured in the same run.
"""

from __future__ import annotations

import time
from pathlib import Path

from benchmarks.config import ResearchConfig
from benchmarks.paddle import bench_paddle, paddle_available
from benchmarks.peer.server import peer_available
from benchmarks.peer_rows import bench_peer
from benchmarks.report import report, write_outputs
from benchmarks.sizes import prepare_sizes, shape_of
from benchmarks.targets import compute_ratios
from ernie_deploy.bench.inprocess import bench_inprocess
from ernie_deploy.bench.rows import LIMIT_INT8, LIMIT_INT8_OPT, LIMIT_OPT, asdict_rows
from ernie_deploy.bench.run import build_layout, checked_config, finish, results_header, served_cells
from ernie_deploy.bench.server_rows import bench_server
from ernie_deploy.core.errors import FailedRequestsError
from ernie_deploy.core.files import write_json
from ernie_deploy.evaluate.inputs import ModelInputs, reference_predictions
from ernie_deploy.export.optimize import optimize_transformer
from ernie_deploy.export.precision import quantize_int8
from ernie_deploy.serving.tokenizer import build_tokenizer


def build_repository(inputs: list[ModelInputs], out: Path, layout: str = "served") -> Path:
    """A layout into `out`: "served" (the default build: each model the layout `build` gives it with none named),
    "classic" (the ensemble's fixed-shape baseline), or any layout's name (repository/layouts)."""
    if layout == "served":
        return build_layout(inputs, out, layout="auto")
    if layout == "classic":
        return build_layout(inputs, out, classic=True)
    return build_layout(inputs, out, layout=layout)


def model_variants(item: ModelInputs, workdir: Path) -> dict[str, Path]:
    """The model's other graphs timed in-process beside it, by row kind: INT8 (`convert --quantize int8`), optimized
    (`convert --optimize`) and optimized then INT8, written into `workdir`."""

    name = item.model.artifact_name
    paths = {kind: workdir / f"{name}_{kind}.onnx" for kind in (LIMIT_INT8, LIMIT_OPT, LIMIT_INT8_OPT)}
    quantize_int8(item.onnx, paths[LIMIT_INT8])
    optimize_transformer(item.onnx, paths[LIMIT_OPT])
    quantize_int8(paths[LIMIT_OPT], paths[LIMIT_INT8_OPT])
    return paths


def _cells(inputs: list[ModelInputs], config: ResearchConfig) -> int:
    tools = len(config.load_generators)
    with_peer = config.peer and peer_available()
    cells = 0
    for item in inputs:
        full = shape_of(item) is None  # a sized model gets the limits, served and ensemble rows only
        paddle = (len(config.batch_sizes) if paddle_available() else 1) if config.paddle and full else 0
        others = tools * len(config.concurrency) * (int(config.classic and full) + int(config.ensemble))
        peer = len(config.concurrency) * (2 if config.client_batch > 1 else 1) if full and with_peer else 0
        inprocess = (2 + 3 * int(config.int8 and full)) * len(config.batch_sizes) + paddle
        cells += inprocess + served_cells(config) + others + peer
    return cells


def _with_sizes(inputs: list[ModelInputs], config: ResearchConfig, sizes_root: str | Path | None) -> list[ModelInputs]:
    """The inputs and, unless they already are sized models, the first model remade in each of `config.sizes`."""
    if config.sizes and not any(shape_of(i) for i in inputs):
        log = print if config.progress else (lambda line: None)
        inputs = [*inputs, *prepare_sizes(inputs, config.sizes, Path(sizes_root) if sizes_root else None, log)]
    return inputs


def _results_header(inputs: list[ModelInputs], config: ResearchConfig, started: float, command: str | None) -> dict:
    """bench.json before any row, with each sized model's shape beside its facts."""
    results = results_header(inputs, config, started, command)
    for item in inputs:
        if shape_of(item):
            results["tasks"][item.model.artifact_name]["shape"] = shape_of(item)
    return results


def _inprocess_rows(
    inputs: list[ModelInputs], config: ResearchConfig, tokenizers: dict, workdir: Path, progress, results: dict
) -> dict:
    """Each task's in-process rows into `results`; returns the in-process predictions the servers are checked
    against, by task."""
    references = {}
    for item in inputs:
        tokenizer = tokenizers[item.model.artifact_name]
        references[item.model.artifact_name] = reference_predictions(item, item.texts[: config.check_texts])
        variants = model_variants(item, workdir) if config.int8 and not shape_of(item) else {}
        results["rows"].extend(asdict_rows(bench_inprocess(item, config, tokenizer, progress, variants)))
        if config.paddle and not shape_of(item):
            results["rows"].extend(asdict_rows(bench_paddle(item, config, tokenizer, progress)))
    return references


def _server_rows(
    inputs: list[ModelInputs],
    config: ResearchConfig,
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
        served = [i for i in inputs if name != "classic" or not shape_of(i)]
        repo = Path(given) if given else build_repository(served, workdir / f"{name}_models", name)
        info, rows = bench_server(repo, name, served, config, references, workdir, progress)
        info["built"] = not given
        results["servers"][name] = info
        results["rows"].extend(asdict_rows(rows))
    if config.peer and peer_available():
        # The peer serves the demo models' static exports; the sized models are not measured against it.
        info, rows = bench_peer([i for i in inputs if not shape_of(i)], config, workdir, progress)
        results["servers"]["peer"] = info
        results["rows"].extend(asdict_rows(rows))


def _summarize(results: dict, started: float) -> dict:
    """The run's totals: its time, the load after it, the failed requests and the ratios between rows."""
    results = finish(results, started)
    results["ratios"] = compute_ratios(results)
    return results


def run_benchmark(
    inputs: list[ModelInputs],
    config: ResearchConfig = ResearchConfig(),
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

    config = checked_config(inputs, config)
    started = time.time()
    own_workdir = None
    if workdir is None:
        own_workdir = tempfile.TemporaryDirectory(prefix="ernie-deploy-bench-")
        workdir = own_workdir.name
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    inputs = _with_sizes(inputs, config, sizes_root)
    tokenizers = {i.model.artifact_name: build_tokenizer(i.static.vocab_file) for i in inputs}
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
    inputs: list[ModelInputs],
    config: ResearchConfig,
    out: Path,
    *,
    plot_png: bool = True,
    repository: str | Path | None = None,
    classic_repository: str | Path | None = None,
) -> dict:
    """`bash scripts/bench.sh`: measure, write bench.json, BENCHMARKS.md and bench.png (unless not `plot_png`) in
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
        raise FailedRequestsError(
            f"{results['errors']} requests failed during the benchmark",
            "read the server logs named in bench.json; the numbers of this run are not valid",
        )
    return results
