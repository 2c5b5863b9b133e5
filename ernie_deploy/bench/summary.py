"""What `ernie-deploy bench` reports (printed, and written as bench.md beside bench.json): the run, then per model
its in-process limit and every served cell as a share of it, answers that differ from in-process ONNX, and failed
requests, loudly."""

from __future__ import annotations

import math

from ernie_deploy.bench.rows import LIMIT, LIMIT_TOK, ROW_KINDS, Row, best_row, load_generators, rows_of, total_errors


def _num(value, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:,.{digits}f}"


def _run(results: dict) -> list[str]:
    machine, versions = results.get("machine", {}), results.get("versions", {})
    server = results.get("servers", {}).get("served", {})
    loads = [" / ".join(f"{v:.2f}" for v in machine.get(f"loadavg_{when}") or []) or "n/a" for when in ("start", "end")]
    return [
        "# ernie-deploy bench",
        "",
        f"- date: {results.get('date')} (took {results.get('seconds', 0):.0f} s); command: `{results.get('command')}`",
        f"- machine: {machine.get('cpu')}, {machine.get('usable_cores')} usable cores, load average at start "
        f"{loads[0]}, at end {loads[1]} (other work on the machine lowers every row)",
        f"- versions: onnxruntime {versions.get('onnxruntime')}, tritonserver {server.get('tritonserver')}; served "
        f"rows driven by {' and '.join(load_generators(results))}",
        f"- served: {'the default build' if server.get('built') else server.get('repository')}, ready in "
        f"{_num(server.get('start_seconds'))} s",
    ]


def _limit_line(results: dict, task: str) -> tuple[str, Row | None]:
    bare, tok = best_row(results, task, LIMIT), best_row(results, task, LIMIT_TOK)
    parts = [f"{ROW_KINDS[r.kind].label} {_num(r.throughput)} seq/s at batch {r.batch}" for r in (bare, tok) if r]
    share = f"; tokenization {100 * tok.tokenize_share:.1f}% of it" if tok and tok.tokenize_share is not None else ""
    return "In-process limit (onnxruntime, best batch): " + ", ".join(parts or ["not measured"]) + share, tok


def _task(results: dict, task: str, facts: dict) -> list[str]:
    line, limit = _limit_line(results, task)
    lines = [
        "",
        f"## {task} ({facts.get('texts')} texts, max_seq_len {facts.get('max_seq_len')})",
        "",
        line,
        "",
        "| served | concurrency | tool | seq/s | × limit+tok | p50 ms | p99 ms | errors |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    served = [
        r for kind in ROW_KINDS.values() if kind.layout == "served" for r in rows_of(results, task, kind.key, None)
    ]
    for row in served:
        share = row.throughput / limit.throughput if row.throughput and limit and limit.throughput else None
        errors = f"**{row.errors}**" if row.errors else "0"
        lines.append(
            f"| {row.label} | {row.concurrency} | {row.tool} | {_num(row.throughput)} | {_num(share, 2)} | "
            f"{_num(row.p50_ms, 2)} | {_num(row.p99_ms, 2)} | {errors} |"
        )
    checked = results.get("servers", {}).get("served", {}).get("tasks", {}).get(task, {})
    if checked:
        lines += ["", f"Served answers equal to in-process ONNX: {checked.get('agree')}/{checked.get('checked')}."]
    return lines


def summary(results: dict) -> str:
    """The report as Markdown."""
    lines = _run(results)
    for task, facts in results.get("tasks", {}).items():
        lines += _task(results, task, facts)
    errors = results.get("errors", total_errors(results))
    differ = [
        f"{task}: {f.get('agree')}/{f.get('checked')} served answers equal the in-process ONNX answers"
        for task, f in results.get("servers", {}).get("served", {}).get("tasks", {}).items()
        if f.get("agree") != f.get("checked")
    ]
    if errors or differ:
        lines += ["", "!" * 78]
        if errors:
            lines.append(f"!! {errors} REQUESTS FAILED: the numbers of this run are not valid")
            lines += [
                f"!!   {r.task} {r.label} c{r.concurrency} ({r.tool}): {r.note}"
                for r in rows_of(results, tool=None)
                if r.errors
            ]
        lines += [f"!! {line}" for line in differ]
        lines.append("!" * 78)
    return "\n".join(lines)
