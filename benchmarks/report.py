"""What a run's results become: BENCHMARKS.md's generated part and the plots written (benchmarks.markdown,
benchmarks.plot), and the report printed at the end (failures loudly)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.config import REFERENCE_CONCURRENCY
from benchmarks.markdown import update_markdown
from benchmarks.plot import SIZES_PLOT, plot, plot_sizes
from benchmarks.results import load_json, mismatches, ratio_table, sanity_notes, sized_models
from benchmarks.targets import compute_ratios
from ernie_deploy.bench.rows import ROW_KINDS, at_concurrency, best_row, rows_of, total_errors


def write_outputs(results: dict, out: Path, plot_png: bool = True) -> list[Path]:
    """BENCHMARKS.md (its generated part) and bench.png in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    written = [update_markdown(out / "BENCHMARKS.md", results, "bench.png" if plot_png else None)]
    if plot_png:
        written.append(plot(results, out / "bench.png"))
        if sized_models(results):
            written.append(plot_sizes(results, out / SIZES_PLOT))
    return written


# -- the console -----------------------------------------------------------------------------------


def report(results: dict) -> str:
    """What the CLI prints at the end: the best rows per task, the ratio table, and any failure, loudly."""
    lines = []
    for task in results.get("tasks", {}):
        parts = []
        for kind in ROW_KINDS.values():
            if kind.inprocess:
                best = best_row(results, task, kind.key)
                if best:
                    parts.append(f"{best.label} {best.throughput:.0f} seq/s (b{best.batch})")
        for kind in ROW_KINDS.values():
            if not kind.inprocess:
                top = at_concurrency(rows_of(results, task, kind.key), REFERENCE_CONCURRENCY)
                if top:
                    parts.append(
                        f"{top.label} {top.throughput:.0f} seq/s (c{top.concurrency}, p99 {top.p99_ms:.1f} ms)"
                    )
        lines.append(f"{task}: " + "; ".join(parts))
    lines += ["", ratio_table(results)]
    for note in sanity_notes(results):
        lines.append(f"note: {note}")
    errors = results.get("errors", total_errors(results))
    problems = mismatches(results)
    if errors or problems:
        bar = "!" * 78
        lines += ["", bar]
        if errors:
            lines.append(f"!! BENCHMARK HAD {errors} FAILED REQUESTS: its numbers are not valid")
            for row in rows_of(results, tool=None):
                if row.errors:
                    lines.append(
                        f"!!   {row.task} {row.label} c{row.concurrency} ({row.tool}): {row.errors} errors {row.note}"
                    )
        for problem in problems:
            lines.append(f"!! {problem}")
        lines.append(bar)
    return "\n".join(lines)


def render_file(results_file: str | Path, out: str | Path | None = None, plot_png: bool = True) -> dict:
    """Rewrite BENCHMARKS.md and bench.png in `out` (default: beside the results file) from a results file, and
    print what was written and the report."""
    results = load_json(results_file)
    results["ratios"] = compute_ratios(results)  # the targets as they are defined now, from the rows
    for path in write_outputs(results, Path(out or Path(results_file).parent), plot_png):
        print(f"wrote {path}")
    print(report(results))
    return results
