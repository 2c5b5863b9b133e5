"""The section of docs/BENCHMARKS.md on information extraction (UIE): each run of `python -m benchmarks.uie` on
record (docs/uie-demo.json, docs/uie.json), served texts/s against the in-process limit and Taskflow's engine."""

from __future__ import annotations

import json

from benchmarks import uie
from benchmarks.page_parts import below_zero, ratio, run_lines, signed, spread, wrap

UIE = """\
`python -m benchmarks.uie` (`--rounds`, `--duration`, `--out`, `--checkpoint`, `--shape`) makes a UIE model (random
weights in an ERNIE 3.0 shape, or a checkpoint given) and takes it through `ernie-deploy export`, `convert` (parity
gate) and `build --runtime python`: the fused python model, built without a schema, so every request sends its own.
Each schema is measured in rounds, every cell once a round, and each cell keeps its best round:

- **in-process**: the step the server runs (built from the model's own `config.pbtxt` and version folder: the same
  tokenizer, onnxruntime options and watch), handed 1 or 8 one-text requests a call as Triton's dynamic batcher hands
  them, no server; the better of the two is the limit. Its model rows run in buckets of similar token length
  (`serving/buckets.py`), and *pad b8* is the tokens its calls ran over the rows' real tokens at batch 8;
- **Taskflow's engine**: the same static model, in process, run as PaddleNLP's Taskflow runs UIE on a CPU (Paddle
  Inference with MKL-DNN, a text read in rows of `max_seq_len` tokens, each padded to its full length, rows in batches
  of 16; `benchmarks/uie_paddle.py`), with as many math threads as onnxruntime gets, given 16 texts a call; the stages
  and span reading are this project's, so the two differ only in how texts become rows and how the rows run
  (paddlenlp 2.8.1's Taskflow itself opens `inference.pdmodel`, and paddle 3.3.1 writes `inference.json`);
- **served**: gRPC to one tritonserver, the closed loop of `bench/load.py` at concurrency 1 and 8.

Before the cells, the server's answers to the first texts of each schema are compared with the in-process step's
(a difference stops the run), so that the limit computes what the server computes, and Taskflow's engine's spans on
the same texts are counted against them. The targets (`TARGETS` in benchmarks/uie.py): served concurrency 8 at least
{limit:g}× the in-process limit and at least {taskflow:g}× Taskflow's engine.""".format(
    limit=uie.TARGETS["served_c8_over_limit"], taskflow=uie.TARGETS["served_c8_over_taskflow"]
)

# The UIE runs on the page, in order: (results file, what it measures).
UIE_RUNS = (
    ("uie-demo.json", "The demo model"),
    ("uie.json", "ERNIE 3.0 nano shape"),
)


def _schema(value) -> str:
    return "`" + json.dumps(value, ensure_ascii=False) + "`"


def information_extraction(results) -> list[str]:
    out = ["## Information extraction (UIE)", "", UIE]
    for name, title in UIE_RUNS:
        out += ["", *_uie_run(results(name), title)]
    return out


def _uie_model(record: dict) -> str:
    model, facts = record["model"], record["facts"]
    keys = list(record["schemas"])
    shape = f"{model['layers']} × {model['hidden']}"
    if "params" in model:
        shape += (
            f", {model['params'] / 1e6:.1f} M parameters; heads scaled by {model['head_scale']:g}, start bias "
            f"{model['start_bias']:g}, end bias {model['end_bias']:g}). With random weights its spans mean nothing; "
            "their counts are given because the relation stage's rows depend on them"
        )
    else:
        shape += ")"
    agree = ", ".join(
        f"{facts[k]['taskflow_agrees']['same_spans']}/{facts[k]['taskflow_agrees']['texts']} ({k})" for k in keys
    )
    return (
        f"The model: {model['checkpoint']} ({shape}. The texts: {record['texts']['source']} "
        f"({record['texts']['mean_chars']:.0f} characters on average), one text and its schema a request. The schemas: "
        + "; ".join(f"**{k}** {_schema(v)}" for k, v in record["schemas"].items())
        + ". Spans compared with the in-process step: "
        + ", ".join(f"{facts[k]['served_spans_checked']} ({k})" for k in keys)
        + f"; texts on which Taskflow's engine finds the same spans: {agree}."
    )


def _uie_windows(facts: dict, keys: list[str]) -> list[str]:
    """How each side cut the texts into rows, where the run recorded it (benchmarks/uie.py taskflow_agrees)."""
    agrees = facts[keys[0]]["taskflow_agrees"]
    if "window_tokens" not in agrees:
        return []
    first = facts[keys[0]]
    return [
        f"- **Rows a text ({keys[0]}):** the served model reads a text in windows of {agrees['window_tokens']} "
        f"tokens, the length its record names (a trained model's: the length it was trained on, which "
        f"[LONG_TEXTS.md](LONG_TEXTS.md) measures against F1), {first['rows_per_text']:.1f} rows a text; Taskflow's "
        f"engine reads it in rows of max_seq_len ({agrees['max_seq_len']} tokens), "
        f"{agrees['taskflow_rows_per_text']:.1f} a text, each padded to its full length."
    ]


def _uie_run(record: dict, title: str) -> list[str]:
    best, facts, q = record["best"], record["facts"], record["ratios"]
    by = {(r["schema"], r["way"], r.get("batch"), r.get("concurrency")): r for r in best}
    keys = list(record["schemas"])
    cells = record["cells"]
    lone_ms = [by[(k, "served", None, 1)]["p50_ms"] - by[(k, "in-process", 1, None)]["p50_ms"] for k in keys]
    lone = ", ".join(f"{signed(ms)} ({k})" for ms, k in zip(lone_ms, keys)) + below_zero(lone_ms)
    merged = [
        by[(k, "in-process", 8, None)]["texts_per_s"] / by[(k, "in-process", 1, None)]["texts_per_s"] for k in keys
    ]
    pads = [by[(k, "in-process", 8, None)]["pad_ratio"] for k in keys]
    c8 = [q[k]["served_c8_over_limit"] for k in keys]
    engine = [q[k]["served_c8_over_taskflow"] for k in keys]
    spreads = []
    for cell in by:
        rounds = [
            r["texts_per_s"]
            for r in record["rows"]
            if (r["schema"], r["way"], r.get("batch"), r.get("concurrency")) == cell
        ]
        spreads.append(max(rounds) / min(rounds))

    def verdict(values, target):
        return "met" if min(values) >= target else "not met"

    read = [
        f"- **Served concurrency 8 over the in-process limit: {', '.join(ratio(v, 3) for v in c8)} "
        f"({', '.join(keys)}); "
        f"target at least {uie.TARGETS['served_c8_over_limit']:g}×: {verdict(c8, uie.TARGETS['served_c8_over_limit'])}"
        f".** Over Taskflow's engine: {', '.join(ratio(v) for v in engine)}; target at least "
        f"{uie.TARGETS['served_c8_over_taskflow']:g}×: {verdict(engine, uie.TARGETS['served_c8_over_taskflow'])}.",
        *_uie_windows(facts, keys),
        f"- **Rows in length buckets:** the batch-8 calls ran {spread(pads, lambda v: f'{v:.2f}', '-')}× the rows' "
        f"real tokens, and in-process batch 8 runs at {', '.join(ratio(v) for v in merged)} of batch 1.",
        f"- **A lone request pays the gRPC hop and the python backend's stub on top of the step**: served c1 p50 over "
        f"the in-process batch-1 call {lone}.",
        f"- **The host moves the cells:** the rounds of one cell differed by up to {ratio(max(spreads))}, so each "
        "ratio is good to about that spread.",
    ]
    return [
        f"**{title}**",
        "",
        wrap(_uie_model(record)),
        "",
        *run_lines(record, end=record.get("loadavg_end"), during=[r["load_average"] for r in record["rows"]]),
        f"- cells: {cells['rounds']} rounds, {cells['warmup_s']:g} s warm-up and {cells['duration_s']:g} s measured a "
        "cell",
        "",
        uie.render(best, facts, q),
        "",
        "Throughput in texts/s; *rows/text* counts every stage's model rows; the limit is in-process batch "
        + " / ".join(sorted({str(q[k]["limit_batch"]) for k in keys}))
        + ".",
        "",
        wrap("\n".join(read)),
    ]
