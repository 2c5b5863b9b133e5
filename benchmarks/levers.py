"""Levers: one build option changed at a time, each layout served alone and loaded, every served throughput
measured in one run (so the ratios between them are what to read); levers.json and a Markdown table."""

from __future__ import annotations

import tempfile
from pathlib import Path

from ernie_deploy.bench.config import BenchConfig
from ernie_deploy.bench.load import prepare_requests
from ernie_deploy.bench.machine import run_record
from ernie_deploy.bench.perf_analyzer import PERF_ANALYZER, perf_analyzer_input
from ernie_deploy.bench.rows import SERVED
from ernie_deploy.bench.run import build_layout
from ernie_deploy.bench.server_rows import perf_analyzer_row, python_row
from ernie_deploy.core.errors import BadOptionsError, FailedRequestsError
from ernie_deploy.core.files import write_json
from ernie_deploy.evaluate.inputs import ModelInputs
from ernie_deploy.repository.options import BuildOptions
from ernie_deploy.repository.resolve import resolves
from ernie_deploy.server.process import TritonServer

# name -> the `ernie-deploy build` options of that layout (everything else at its default).
LEVERS = {
    "--layout ensemble (ragged batching, merged runs, no spinning, warmup)": {},
    "--no-ragged (Triton batches same-length requests only)": {"ragged": False},
    "--no-ragged --pad-to-multiple-of 16 (length buckets)": {"ragged": False, "pad_to_multiple_of": 16},
    "--ort-spinning run (busy inside a run only)": {"ort_spinning": "run"},
    "--ort-spinning always": {"ort_spinning": "always"},
    "--ort-threads 1": {"ort_threads": 1},
    "--instances 2 --ort-threads 1": {"instances": 2, "ort_threads": 1},
    "--max-queue-delay-us 1000": {"max_queue_delay_us": 1000},
    "--fused": {"layout": "fused"},
    "--fused --ort-spinning always (fewest hops, no thread wake-ups)": {"layout": "fused", "ort_spinning": "always"},
    "--graph-postprocess (classifiers: the postprocess in the ONNX graph; tokenizer -> model)": {
        "layout": "graph-postprocess"
    },
    "--tokenizer-in-model (tokenizer and onnxruntime in one step -> postprocess)": {"layout": "tokenizer-in-model"},
    "--classic": {"classic": True},
}


def measure_levers(
    inputs: list[ModelInputs], config: BenchConfig, workdir: Path, levers: dict[str, dict] | None = None
) -> list[dict]:
    """Build the repository once per lever, serve it alone, and load it at each concurrency (1 text per
    request). Every lever is measured in the same run, so the ratios between them are what to read."""

    out = []
    tool = config.load_generators[0]  # perf_analyzer where installed (`--load-generator auto`)
    for n, (name, options) in enumerate((levers or LEVERS).items()):
        # Each lever changes the ensemble unless it names another layout (the rows' names say so).
        built = {"layout": "ensemble", **options}
        # A lever that only some kinds have (--graph-postprocess: classifiers) is measured on those; no row else.
        fitting = [i for i in inputs if resolves(i.model, BuildOptions(**{"runtime": "python", **built}))]
        if not fitting:
            continue
        repo = build_layout(fitting, workdir / f"lever{n}", **built)
        log = workdir / f"lever{n}.log"
        with TritonServer(
            repo, http_port=0, grpc_port=0, metrics_port=0, log_file=log, grpc_tls=config.grpc_tls
        ) as server:
            for item in fitting:
                requests = prepare_requests(item.task, item.texts, 1)
                input_file = None
                if tool == PERF_ANALYZER:
                    input_file = perf_analyzer_input(item.task, item.texts, workdir / f"lever{n}_{item.name}.json")
                for concurrency in config.concurrency:
                    if tool == PERF_ANALYZER:
                        row = perf_analyzer_row(
                            server, item, config, requests, input_file, SERVED, 1, concurrency, workdir
                        )
                    else:
                        row = python_row(server, item, config, requests, SERVED, 1, concurrency)
                    out.append(
                        {
                            "lever": name,
                            "options": options,
                            "task": item.model.artifact_name,
                            "concurrency": concurrency,
                            "throughput": row.throughput,
                            "p50_ms": row.p50_ms,
                            "p99_ms": row.p99_ms,
                            "errors": row.errors,
                            "ready_s": server.start_seconds,
                            "tool": tool,
                        }
                    )
                    if config.progress:
                        print(
                            f"{name} | {item.model.artifact_name} c{concurrency}: {row.throughput:.1f} seq/s, "
                            f"p50 {row.p50_ms:.2f} ms, p99 {row.p99_ms:.2f} ms, errors {row.errors}"
                        )
    return out


def render_levers(rows: list[dict]) -> str:
    """Markdown: one row per lever, throughput and p50 per task and concurrency, and the ratio to the row that
    changes nothing (the ensemble with every other option at its default)."""
    cells = sorted({(r["task"], r["concurrency"]) for r in rows})
    base = {(r["task"], r["concurrency"]): r["throughput"] for r in rows if not r["options"]}
    head = " | ".join(f"{t} c{c} seq/s (× ensemble) · p50 ms" for t, c in cells)
    lines = [f"| build options | {head} |", "|---|" + "---:|" * len(cells)]
    for lever in dict.fromkeys(r["lever"] for r in rows):
        got = {(r["task"], r["concurrency"]): r for r in rows if r["lever"] == lever}
        parts = []
        for cell in cells:
            r = got.get(cell)
            ratio = f" ({r['throughput'] / base[cell]:.2f}×)" if r and base.get(cell) else ""
            parts.append(f"{r['throughput']:.0f}{ratio} · {r['p50_ms']:.2f}" if r else "–")
        lines.append(f"| {lever} | " + " | ".join(parts) + " |")
    return "\n".join(lines)


def pick_levers(keys: list[str] | None) -> dict[str, dict]:
    """The ensemble row (no option changed) and the levers that set any of these build options (BuildOptions field
    names, e.g. ort_spinning) or choose any of these layouts (e.g. fused, graph-postprocess); None: every lever."""
    if not keys:
        return LEVERS
    keys = {k.replace("_", "-") if k.replace("_", "-") in _layouts() else k for k in keys}
    known = {key for options in LEVERS.values() for key in options} | _layouts()
    unknown = sorted(set(keys) - known)
    if unknown:
        raise BadOptionsError(
            f"--lever {', '.join(unknown)}: no lever sets that build option or layout",
            f"use some of {', '.join(sorted(known))}",
        )
    return {
        name: options
        for name, options in LEVERS.items()
        if not options or set(options) & keys or options.get("layout") in keys
    }


def _layouts() -> set[str]:
    return {options["layout"] for options in LEVERS.values() if "layout" in options}


def run_levers(
    inputs: list[ModelInputs], config: BenchConfig, out: Path, levers: dict[str, dict] | None = None
) -> list[dict]:
    """`bash scripts/bench.sh levers`: measure every lever (or `levers`) in a temporary folder, write levers.json in
    `out`, print the table. Failed requests raise, after levers.json is written."""
    with tempfile.TemporaryDirectory(prefix="ernie-deploy-levers-") as work:
        rows = measure_levers(inputs, config, Path(work), levers)
    write_json(run_record(rows), out / "levers.json")
    print(render_levers(rows))
    if any(r["errors"] for r in rows):
        raise FailedRequestsError("requests failed while measuring the levers", "read the server logs")
    return rows
