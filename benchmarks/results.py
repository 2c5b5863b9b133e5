"""A run's results read back and checked: the results file of this version's schema, the sized models' numbers, signs
that the machine was not quiet, answers that differ from in-process ONNX, and the ratio table as text."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.config import REFERENCE_CONCURRENCY
from ernie_deploy.bench.config import SCHEMA
from ernie_deploy.bench.rows import ENSEMBLE, LIMIT_TOK, SERVED, SERVED_BATCH, best_row, rows_of
from ernie_deploy.core.errors import BadDataError

# -- results file ----------------------------------------------------------------------------------


def load_json(path: str | Path) -> dict:
    """A results file (bench.json, written with core.files.write_json), checked to be of this version's schema."""
    path = Path(path)
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BadDataError(f"cannot read benchmark results {path}: {exc}", "rerun `bash scripts/bench.sh`") from None
    if results.get("schema") != SCHEMA:
        raise BadDataError(
            f"{path} has results schema {results.get('schema')!r}; this version reads {SCHEMA}",
            "rerun `bash scripts/bench.sh`",
        )
    return results


# -- the sized models ------------------------------------------------------------------------------


def sized_models(results: dict) -> list[tuple[str, dict]]:
    """The models remade in real shapes (benchmarks.sizes), smallest first, each with its shape's facts."""
    sized = [(name, facts["shape"]) for name, facts in results.get("tasks", {}).items() if facts.get("shape")]
    return sorted(sized, key=lambda item: item[1]["params"])


def size_facts(results: dict, name: str) -> dict:
    """One model's numbers for the size table: the in-process limit with tokenization (best batch), the lone
    request's extra ms over it (extra_ms), and the served layouts at concurrency 1, 8 and 16 as shares of the limit."""
    limit = best_row(results, name, LIMIT_TOK)
    alone = next((r for r in rows_of(results, name, LIMIT_TOK) if r.batch == 1), None)
    facts = {"limit": limit, "alone": alone}
    for kind in (SERVED, SERVED_BATCH, ENSEMBLE):
        for c in (1, REFERENCE_CONCURRENCY, 16):
            row = next((r for r in rows_of(results, name, kind) if r.concurrency == c), None)
            facts[kind, c] = row
    one = facts[SERVED, 1]
    facts["extra_ms"] = one.p50_ms - alone.p50_ms if one and alone and one.p50_ms and alone.p50_ms else None
    return facts


# -- checks on a run -------------------------------------------------------------------------------


def sanity_notes(results: dict) -> list[str]:
    """Signs that the machine was not quiet: numbers from such a run are not comparable."""
    notes = []
    machine = results.get("machine", {})
    cores = machine.get("usable_cores") or machine.get("cores") or 1
    for when in ("start", "end"):
        load = machine.get(f"loadavg_{when}")
        if load and load[0] > 0.5 * cores:
            notes.append(
                f"the machine was busy at the {when} of the run (1-minute load average {load[0]:.1f} on "
                f"{cores} cores); other work shares the cores, so rerun on a quiet machine"
            )
    for ratio in results.get("ratios", []):
        if ratio["key"] == "served_vs_limit" and ratio["value"] and ratio["value"] > 1.05:
            notes.append(
                f"{ratio['task']}: served throughput is above the in-process limit ({ratio['value']:.2f}x), "
                "so the in-process rows were slowed by something else on the machine"
            )
    return notes


def mismatches(results: dict) -> list[str]:
    """Served answers that differ from the in-process ONNX ones (the classic layout pads, so float noise can flip a
    near tie there; it is reported, not counted as an error)."""
    found = []
    for name, info in results.get("servers", {}).items():
        for task, facts in info.get("tasks", {}).items():
            if facts.get("agree") != facts.get("checked"):
                found.append(
                    f"{name} {task}: {facts.get('agree')}/{facts.get('checked')} answers equal the "
                    "in-process ONNX answers"
                )
    return found


# -- the ratio table -------------------------------------------------------------------------------


def format_value(ratio: dict) -> str:
    value = ratio["value"]
    if value is None:
        return "n/a"
    if ratio["unit"] == "%":
        return f"{100 * value:.1f}%"
    if ratio["unit"]:
        return f"{value:.2f} {ratio['unit']}"
    return f"{value:.2f}x"


def format_target(ratio: dict) -> str:
    sign = "≥" if ratio["op"] == ">=" else "≤"
    threshold = ratio["threshold"]
    if ratio["unit"] == "%":
        return f"{sign} {100 * threshold:.0f}%"
    return f"{sign} {threshold:g}{(' ' + ratio['unit']) if ratio['unit'] else 'x'}"


def format_met(ratio: dict) -> str:
    return {True: "met", False: "NOT MET", None: "n/a"}[ratio["met"]]


def ratio_table(results: dict) -> str:
    """The ratio table as aligned plain text (what the CLI prints)."""
    lines = [("task", "measure", "value", "target", "", "detail")]
    for r in results.get("ratios", []):
        lines.append((r["task"] or "all", r["name"], format_value(r), format_target(r), format_met(r), r["detail"]))
    widths = [max(len(str(line[i])) for line in lines) for i in range(5)]
    return "\n".join(
        "  ".join(str(v).ljust(w) for v, w in zip(line[:5], widths)) + "  " + line[5] for line in lines
    ).rstrip()
