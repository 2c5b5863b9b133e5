"""docs/BENCHMARKS.md's section on the demo UIE in static INT8 against FP32 (docs/uie-int8.json, written by
`python -m benchmarks.uie_int8`)."""

from __future__ import annotations

import shlex

from benchmarks.page_parts import ratio, run_lines, spread, wrap
from benchmarks.page_parts import table as markdown_table

COMMAND = "python -m benchmarks.uie_int8"

ABOUT = """\
What `convert --quantize int8` makes of an extraction model, measured on the shipped demo UIE (demo/uie): the same
checkpoint through `ernie-deploy fetch --bootstrap`, `export`, `convert` (FP32) or `convert --quantize int8` (static
scales, calibrated on the prompted rows of the dev split's first 256 texts under the model's three entity types, gated
on the spans of the test split's first 256 texts) and `build --runtime python`, each then run in process as the server
runs it: the extraction step built from the model's own config and version folder (the same tokenizer, row buckets,
onnxruntime session options and chunking), handed B one-text requests a call as Triton's dynamic batcher hands them,
each text with the model's built schema. The cells of the two models alternate within each round, and each cell keeps
its best round. Span F1 is each step's answers on the whole test split, scored as `ernie-deploy eval` scores them."""


def _command(record: dict) -> str:
    """The recorded command as a reader types it (the process's argv names the module's file)."""
    words = shlex.split(record["command"])
    return shlex.join([*COMMAND.split(), *words[1:]])


def table(record: dict) -> str:
    """Texts/s of each model at each B (its best round), INT8 over FP32, and span F1 on the test split."""
    by = {(r["model"], r["batch"]): r for r in record["best"]}
    f1 = record["span_f1"]
    rows = []
    for name in ("fp32", "int8"):
        cells = [name.upper()]
        for b in record["cells"]["batches"]:
            cells.append(f"{by[(name, b)]['texts_per_s']:.1f}")
            cells.append(f"{by[(name, b)]['p50_ms']:.2f}")
        cells += [f"{f1[name]['span_f1']:.4f}", f"{f1[name]['precision']:.4f}", f"{f1[name]['recall']:.4f}"]
        rows.append(cells)
    ratios = ["INT8 / FP32"]
    for b in record["cells"]["batches"]:
        ratios += [ratio(record["ratios"][f"b{b}"]), ""]
    drop = record["f1_drop_points"]
    rows.append([*ratios, f"{-drop:+.2f} points", "", ""])
    head = ["model"]
    for b in record["cells"]["batches"]:
        head += [f"texts/s b{b}", f"p50 ms b{b}"]
    head += [f"span F1 (n={f1['fp32']['n']:,})", "precision", "recall"]
    return "\n".join(markdown_table(head, rows, "l" + "r" * (len(head) - 1)))


def uie_int8(results) -> list[str]:
    record = results("uie-int8.json")
    gate, independence = record["int8_gate"], record["batch_independence"]
    static, dynamic = independence["int8-static"], independence["int8-dynamic (in process, for contrast)"]
    cal = gate["calibration"]
    q, targets = record["ratios"], record["targets"]
    worst_static = max(c["max_abs_probability_diff"] for c in static.values())
    differ_static = sum(c["texts_with_other_spans"] for c in static.values())
    dyn = dynamic["alone_vs_16_a_request"]
    model = record.get("model_ratios")
    batches = record["cells"]["batches"]
    names = " / ".join(f"b{b}" for b in batches)
    if model:  # the step's seconds inside its onnxruntime runs were clocked
        by = {(r["model"], r["batch"]): r for r in record["best"]}
        share = [by[("fp32", b)]["model_s"] / by[("fp32", b)]["seconds"] for b in batches]
        why = (
            f"; its onnxruntime runs alone, on the same rows with the same session options, run at "
            f"{', '.join(ratio(v) for v in model.values())} FP32's ({names}). INT8 shortens only those runs: the FP32 "
            f"step spends {', '.join(f'{v:.0%}' for v in share)} of its time in them ({names}), the rest in what both "
            "steps do alike (tokenizing, building the rows, decoding the spans, the answer's JSON)"
        )
    else:
        why = ""
    worst = "bit-identical probabilities" if worst_static == 0 else f"probabilities within {worst_static:.1e}"
    read = [
        f"- **Span F1 {'holds' if record['f1_drop_points'] <= targets['f1_drop_points'] else 'drops'}**: INT8 "
        f"{record['span_f1']['int8']['span_f1']:.4f} against FP32 {record['span_f1']['fp32']['span_f1']:.4f} on the "
        f"test split (the target: within {targets['f1_drop_points']:g} point).",
        f"- **The step runs INT8 at {spread(list(q.values()), ratio)} FP32's texts/s** ({names}: "
        f"{', '.join(ratio(v) for v in q.values())}; the target: {ratio(targets['speed_ratio'], 1)}){why}.",
        f"- **The gate**: {cal['rows']:,} calibration rows ({cal['n']} texts × {len(cal['prompts'])} types, in the "
        f"model's windows); on its {gate['n']} test texts the INT8 spans scored span F1 {gate['span_f1']:.4f} against "
        f"FP32's (the gate: {gate['min_span_f1']:g}), {gate['spans_agree']:.2%} of the {gate['pairs']} (text, type) "
        f"pairs kept every span, and the largest token probability moved by {gate['max_abs_diff']:.3f}.",
        f"- **A text's answer does not depend on its batch**: the INT8 step answered the first "
        f"{static['alone_vs_16_a_request']['texts']} test texts one a request, 16 a request, 16 a request in reverse "
        f"order and as 8 merged requests: {differ_static} texts with other spans, {worst}. A dynamic-INT8 copy of the "
        f"same FP32 model (which `convert` refuses for extraction) answered {dyn['texts_with_other_spans']} of "
        f"{dyn['texts']} texts with other spans alone than in a request of 16, probabilities moving by up to "
        f"{dyn['max_abs_probability_diff']:.3f}.",
    ]
    cells = record["cells"]
    return [
        "### UIE in INT8",
        "",
        wrap(ABOUT),
        "",
        *run_lines(
            record, _command(record), end=record.get("loadavg_end"), during=[r["load_average"] for r in record["rows"]]
        ),
        f"- cells: {cells['rounds']} rounds, {cells['warmup_s']:g} s warm-up and {cells['duration_s']:g} s measured a "
        f"cell; texts: {record['texts']['speed']}",
        "",
        table(record),
        "",
        wrap("\n".join(read)),
    ]
