"""The generated part of BENCHMARKS.md: the run, the targets, the size table, each task's rows and the load
generators side by side, written between the bench markers of a hand-written file."""

from __future__ import annotations

import math
import re
from pathlib import Path

from benchmarks.config import REFERENCE_CONCURRENCY
from benchmarks.plot import SIZES_PLOT
from benchmarks.results import (
    format_met,
    format_target,
    format_value,
    mismatches,
    sanity_notes,
    size_facts,
    sized_models,
)
from ernie_deploy.bench.rows import (
    ENSEMBLE,
    ROW_KINDS,
    SERVED,
    SERVED_BATCH,
    driven_by_tools,
    load_generators,
    rows_of,
    total_errors,
)
from ernie_deploy.core.errors import BadDataError
from ernie_deploy.core.files import atomic_path

BEGIN_MARK = "<!-- bench:begin -->"
END_MARK = "<!-- bench:end -->"
MARKDOWN_TEMPLATE = f"""# Benchmarks

Throughput and latency of the served pipeline next to its limits, measured by the repository's benchmarks
(`bash scripts/bench.sh`). Everything between the two `bench` marker comments below is rewritten by
each run; the rest of this file is hand-written and kept.

{BEGIN_MARK}
{END_MARK}

## Levers

_Hand-written, kept by the generator: what moves these numbers, and by how much._
"""


# -- Markdown --------------------------------------------------------------------------------------


def _num(value, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:,.{digits}f}"


def _load_text(load) -> str:
    return " / ".join(f"{v:.2f}" for v in load) if load else "n/a"


def render_task_table(results: dict, task: str) -> list[str]:
    max_len = results.get("tasks", {}).get(task, {}).get("max_seq_len", 128)
    lines = [
        "| row | batch | concurrency | seq/s | p50 ms | p95 ms | p99 ms | client CPU ms/req | "
        "server CPU ms/seq | errors | note |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for kind in ROW_KINDS.values():
        for row in rows_of(results, task, kind.key):
            best = " **best**" if row.best and kind.inprocess else ""
            note = row.note
            if row.tokenize_share is not None:
                note = (note + "; " if note else "") + f"tokenization {100 * row.tokenize_share:.1f}%"
            errors = f"**{row.errors}**" if row.errors else "0"
            lines.append(
                f"| {row.title(max_len)}{best} | {row.batch or '–'} | "
                f"{row.concurrency if row.concurrency is not None else '–'} | {_num(row.throughput)} | "
                f"{_num(row.p50_ms, 2)} | {_num(row.p95_ms, 2)} | {_num(row.p99_ms, 2)} | "
                f"{_num(row.client_cpu_ms, 2)} | {_num(row.server_cpu_ms, 2)} | {errors} | {note} |"
            )
    return lines


def _share(row, limit) -> str:
    if not (row and row.throughput and limit and limit.throughput):
        return "–"
    return f"{row.throughput:,.0f} ({row.throughput / limit.throughput:.2f}×)"


def render_sizes(results: dict) -> list[str]:
    """The size table: per ERNIE 3.0 shape, what the in-process limit does and what serving keeps of it."""
    sized = sized_models(results)
    if not sized:
        return []
    c = REFERENCE_CONCURRENCY
    lines = [
        "## Sizes",
        "",
        "The classifier remade in each ERNIE 3.0 shape (random weights, its vocabulary and labels, the same test "
        "texts), converted under the parity gate and served beside it. Throughput in seq/s, and in brackets as a "
        "share of the in-process limit with tokenization (best batch). *Lone request*: served p50 at concurrency 1 "
        "over the in-process batch-1 p50 with tokenization.",
        "",
        f"| size | layers × hidden | params | limit+tok seq/s (batch) | in-process b1 p50 ms | served c1 p50 ms "
        f"| lone request +ms | served c1 | served c{c} | served c16 | batched requests c{c} | ensemble c1 "
        f"| ensemble c{c} | ensemble c16 | server CPU ms/text, c{c} | served p99 ms, c{c} |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, shape in sized:
        f = size_facts(results, name)
        limit, alone, one, ref, extra = f["limit"], f["alone"], f[SERVED, 1], f[SERVED, c], f["extra_ms"]
        lines.append(
            f"| {shape['size']} | {shape['layers']} × {shape['hidden']} | {shape['params'] / 1e6:.0f} M | "
            f"{_num(limit.throughput if limit else None)}{f' (b{limit.batch})' if limit else ''} | "
            f"{_num(alone.p50_ms if alone else None, 2)} | {_num(one.p50_ms if one else None, 2)} | "
            f"{_num(extra, 2)} | {_share(one, limit)} | {_share(ref, limit)} | {_share(f[SERVED, 16], limit)} | "
            f"{_share(f[SERVED_BATCH, c], limit)} | {_share(f[ENSEMBLE, 1], limit)} | "
            f"{_share(f[ENSEMBLE, c], limit)} | {_share(f[ENSEMBLE, 16], limit)} | "
            f"{_num(ref.server_cpu_ms if ref else None, 2)} | {_num(ref.p99_ms if ref else None, 1)} |"
        )
    return lines


TOOL_NAMES = {
    "python": "the built-in asyncio generator (tritonclient gRPC, one event loop)",
    "perf_analyzer": "perf_analyzer (Triton's C++ load generator{version})",
}


def format_steps(steps: dict | None) -> str:
    """ "ernie_tokenizer 0.19/0.64 x1.1; ..." (queue / compute ms per request, texts per execution)."""
    if not steps:
        return ""
    parts = []
    for name, s in steps.items():
        per = f" x{s['texts_per_execution']:.1f}" if s.get("texts_per_execution") else ""
        parts.append(f"{name} {s['queue_ms']:.2f}/{s['compute_ms']:.2f}{per}")
    return "; ".join(parts)


def render_tools(results: dict) -> list[str]:
    """Each served cell measured by every load generator of the run, next to each other: what the client costs and
    whether the two tools see the same server. Empty for a run with one generator."""
    tools = load_generators(results)
    if len(tools) < 2:
        return []
    lines = [
        "",
        "## Load generators side by side",
        "",
        f"Every served cell was measured by {' and by '.join(tools)}, in turn, on the same server. "
        "Client CPU is the load generator's own (perf_analyzer: its process, per request the server answered "
        "while it ran); per step: mean queue / compute ms per request and texts per execution (what the dynamic "
        "batcher merged), from the server's statistics over the cell.",
        "",
        "| task | row | concurrency | tool | seq/s | p50 ms | p99 ms | client CPU ms/req | server CPU ms/seq | "
        "errors | per step: queue/compute ms, texts per execution |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for task, facts in results.get("tasks", {}).items():
        max_len = facts.get("max_seq_len", 128)
        for kind in ROW_KINDS.values():
            if not driven_by_tools(kind.key):
                continue
            rows = [r for tool in tools for r in rows_of(results, task, kind.key, tool)]
            for row in sorted(rows, key=lambda r: (r.concurrency, tools.index(r.tool) if r.tool in tools else 9)):
                errors = f"**{row.errors}**" if row.errors else "0"
                steps = format_steps(row.steps)
                lines.append(
                    f"| {task} | {row.title(max_len)} | {row.concurrency} | {row.tool} | {_num(row.throughput)} | "
                    f"{_num(row.p50_ms, 2)} | {_num(row.p99_ms, 2)} | {_num(row.client_cpu_ms, 3)} | "
                    f"{_num(row.server_cpu_ms, 2)} | {errors} | {steps} |"
                )
    return lines


def _render_run(results: dict) -> list[str]:
    """The "Run" section: when, the command, the machine and its load, the versions, the cells and each server."""
    machine, versions = results.get("machine", {}), results.get("versions", {})
    servers = results.get("servers", {})
    tritonserver = next((s.get("tritonserver") for s in servers.values() if s.get("tritonserver")), None)
    settings = results.get("settings", {})
    lines = [
        "## Run",
        "",
        f"- date: {results.get('date')} (took {results.get('seconds', 0):.0f} s)",
        f"- command: `{results.get('command')}`",
        f"- machine: {machine.get('cpu')}, {machine.get('cores')} cores ({machine.get('usable_cores')} usable), "
        f"{machine.get('memory_gib')} GiB, {machine.get('platform')}, Python {machine.get('python')}; "
        f"load average at start {_load_text(machine.get('loadavg_start'))}, "
        f"at end {_load_text(machine.get('loadavg_end'))}",
        f"- versions: onnxruntime {versions.get('onnxruntime')}, tritonserver {tritonserver}, "
        f"tritonclient {versions.get('tritonclient')}, nvidia-pytriton {versions.get('nvidia-pytriton')}, "
        f"paddlepaddle {versions.get('paddlepaddle')}, paddlenlp {versions.get('paddlenlp')}",
        f"- cells: {settings.get('duration_s')} s per served cell"
        f"{' (' + str(settings.get('requests')) + ' requests)' if settings.get('requests') else ''}, "
        f"{settings.get('inproc_duration_s')} s per in-process cell, {settings.get('warmup_s')} s warm-up each; "
        f"onnxruntime threads: {settings.get('ort_threads')}",
        "- served rows driven by "
        + " and by ".join(
            TOOL_NAMES.get(t, t).format(
                version=f"; {versions['perf_analyzer']}" if versions.get("perf_analyzer") else ""
            )
            for t in load_generators(results)
        )
        + (f", gRPC over {settings['grpc_tls']}" if settings.get("grpc_tls") else ""),
    ]
    return lines + [_server_line(name, info) for name, info in servers.items()]


def _server_line(name: str, info: dict) -> str:
    """One server of the run: what it served, how fast it was ready and answered first, and its accuracy."""
    colds = ", ".join(
        f"{t} {facts['cold_ms']:.1f} ms"
        for t, facts in info.get("tasks", {}).items()
        if facts.get("cold_ms") is not None
    )
    source = info.get("source") or ("built by the benchmark" if info.get("built") else f"`{info.get('repository')}`")
    line = (
        f"- {name} server ({source}): ready in {_num(info.get('start_seconds'), 1)} s; "
        f"first request to each model: {colds}"
    )
    scored = [(t, f) for t, f in info.get("tasks", {}).items() if f.get("accuracy") is not None]
    if scored:
        line += "; accuracy on the test texts: " + ", ".join(
            f"{t} {f['accuracy']:.4f} (in-process ONNX {f['onnx_accuracy']:.4f}, {f['checked']} texts)"
            for t, f in scored
        )
    return line


def render_generated(results: dict, plot_name: str | None = "bench.png") -> str:
    """The generated part of BENCHMARKS.md (without the markers)."""
    servers = results.get("servers", {})
    lines = ["<!-- generated by `bash scripts/bench.sh`: edits between the markers are overwritten -->", ""]
    errors = results.get("errors", total_errors(results))
    if errors:
        lines += [f"> **WARNING: {errors} requests failed in this run; its numbers are not valid.**", ""]
    for problem in mismatches(results):
        lines += [f"> **Check:** {problem}.", ""]
    for note in sanity_notes(results):
        lines += [f"> **Note:** {note}.", ""]
    lines += _render_run(results)
    lines += ["", "## Targets", "", "| task | measure | value | target | | detail |", "|---|---|---:|---|---|---|"]
    for r in results.get("ratios", []):
        met = format_met(r)
        lines.append(
            f"| {r['task'] or 'all'} | {r['name']} | {format_value(r)} | {format_target(r)} | "
            f"{'**' + met + '**' if r['met'] is False else met} | {r['detail']} |"
        )
    sizes = render_sizes(results)
    if sizes:
        lines += ["", *sizes]
        if plot_name:
            lines += ["", f"![served throughput as a share of the in-process limit, by model size]({SIZES_PLOT})"]
    for task, facts in results.get("tasks", {}).items():
        lines += ["", f"## {task} ({facts.get('texts')} test texts)", ""]
        lines += render_task_table(results, task)
        warm = next((r for r in rows_of(results, task, SERVED) if r.concurrency == 1), None)
        cold = servers.get("served", {}).get("tasks", {}).get(task, {}).get("cold_ms")
        if warm and cold is not None:
            lines += [
                "",
                f"Served: first request to the model after ready {cold:.1f} ms; warm p50 at concurrency 1 "
                f"{_num(warm.p50_ms, 2)} ms.",
            ]
    lines += render_tools(results)
    if plot_name:
        lines += ["", f"![throughput and p99 latency against concurrency]({plot_name})"]
    return "\n".join(lines)


def update_markdown(path: str | Path, results: dict, plot_name: str | None = "bench.png") -> Path:
    """Write the generated part between the markers of `path` (creating the file from a template with a
    hand-written Levers section when it does not exist), keeping everything outside them; atomically."""
    path = Path(path)
    text = path.read_text(encoding="utf-8") if path.exists() else MARKDOWN_TEMPLATE
    text = replace_generated(text, render_generated(results, plot_name))
    with atomic_path(path, suffix=".md") as tmp:
        tmp.write_text(text, encoding="utf-8")
    return path


def replace_generated(text: str, generated: str) -> str:
    block = f"{BEGIN_MARK}\n{generated.strip()}\n{END_MARK}"
    begin, end = text.find(BEGIN_MARK), text.find(END_MARK)
    if begin == -1 and end == -1:
        # A hand-written file without markers: the generated part goes first under its title, nothing is lost.
        match = re.search(r"^# .*\n", text, re.MULTILINE)
        at = match.end() if match else 0
        return text[:at] + "\n" + block + "\n\n" + text[at:].lstrip("\n")
    if begin == -1 or end == -1 or end < begin:
        raise BadDataError(
            "BENCHMARKS.md has one bench marker without the other",
            f"keep both {BEGIN_MARK} and {END_MARK}, in this order, or remove both",
        )
    return text[:begin] + block + text[end + len(END_MARK) :]
