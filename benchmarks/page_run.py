"""The sections of docs/BENCHMARKS.md fed by the main run's results file (docs/bench.json): the run itself (what
`bash scripts/bench.sh` writes between its markers), why each target stands where it does, the default layout, the
ERNIE 3.0 size to pick, INT8, and `tune`, which has no results file here."""

from __future__ import annotations

from benchmarks.markdown import BEGIN_MARK, END_MARK, render_generated
from benchmarks.page_parts import ratio, signed, table, wrap
from benchmarks.results import sized_models
from ernie_deploy.bench.rows import (
    ENSEMBLE,
    LIMIT,
    LIMIT_INT8,
    LIMIT_INT8_OPT,
    LIMIT_OPT,
    LIMIT_TOK,
    SERVED,
    best_row,
    rows_of,
)

BENCH = "bench.json"

MAIN_RUN = """\
The main run serves the test texts through a real tritonserver over gRPC and sets each number next to a limit
measured in the same run: the same ONNX model in-process at its best batch size, with and without tokenization, its
INT8 and optimized graphs, and Paddle Inference. Beside the demo models it serves the classifier remade in the ERNIE
3.0 shapes users deploy (`--sizes`, default nano, mini, medium and base: PaddleNLP's own configurations, random
weights, the demo's vocabulary and test texts, converted once under the parity gate into `artifacts/sizes/`), the
ensemble and classic layouts, and the peer a Paddle user would pick: PaddleNLP's SimpleServing on the same static
model, its answers checked against the test split (`--no-peer` skips it).

The served rows are driven by perf_analyzer, Triton's C++ load generator, when it is installed (on PATH, or unpacked
by `scripts/install_perf_analyzer.sh` from the tritonclient 2.41.0 wheel and Debian's libb64; newer PyPI builds need
glibc 2.38), else by a built-in asyncio generator ([Load generators](#load-generators)). What the generated
repository does for speed by default is described in
[SERVING.md](SERVING.md#what-the-generated-repository-does-for-speed); INT8 and the optimized graph in
[CONVERT.md](CONVERT.md#smaller-and-faster-models-int8-optimized-graph-fp16)."""

MAIN_COMMANDS = """\
```bash
bash scripts/bench.sh                         # every row below: docs/bench.json, the marked part, the plots
bash scripts/bench.sh --sizes nano,medium     # the ERNIE 3.0 shapes served beside the demo models: these two only
bash scripts/bench.sh --smoke                 # every row in seconds on a tiny model; its timings mean nothing
bash scripts/bench.sh render docs/bench.json  # the part between the markers and the plots again, nothing measured
bash scripts/install_perf_analyzer.sh         # perf_analyzer 2.41.0 unpacked once into ~/.cache/ernie-deploy/tools
ernie-deploy stats --interval 10              # a running server: per model, each step's queue and compute ms a request
```"""

WHY = """\
The [Targets](#targets) table says which targets the main run met. Each is read against rows of the same run, and
where the served time goes comes from Triton's statistics over each served cell: each pipeline step's mean queue and
compute ms a request, and the texts it ran per execution (what the dynamic batcher merged). `ernie-deploy stats`
shows the same for a running server. Per model, at concurrency 1, and the texts per execution at concurrency 8:"""

WHY_READ = """\
- **A lone request, at most 1 ms over the in-process batch-1 call with tokenization.** The default build on the
  python runtime is fused: one python step holds the tokenizer, onnxruntime and the postprocess, so its compute less
  the in-process call is what the server adds inside it: the python backend's round trip, and onnxruntime's threads
  waking at every parallel section, since spinning is off by default ([Levers](#levers) says why). The gRPC hop comes
  on top. The ensemble pays for two more python steps, the tokenizer and the postprocess, each costing about a
  round trip while its own work is a small share of the model's (the tokenization share of the limit rows).
- **Concurrency 8 at 0.8× or more of the in-process limit with tokenization.** Under load the dynamic batcher merges
  what waits, but every request still pays its round trip through the python backend. That cost is nearly fixed
  while the model's own grows with its size, so the share of the limit rises from nano to base ([Sizes](#sizes));
  several texts per request spread it (the "batched requests" column there).
- **5× PaddleNLP SimpleServing at concurrency 8, p99 no worse.** SimpleServing's answers are checked against the
  test split (the peer server's line under [Run](#run)). It answers one request at a time behind a lock, runs batch 1
  at `max_seq_len` whatever the text's length (its handler reads `max_seq_len` and `batch_size` only when a client
  leaves them out), tokenizes in Python, and gives Paddle Inference ceil(cores / 2) math threads. The token model is
  not compared: SimpleServing has no handler for a token classifier that answers entities.
- **3× the classic layout.** Classic pads every text to `max_seq_len` and never batches: short titles pay most for
  the padding, the longer MSRA sentences less.
- **INT8 at 1.5× FP32 in-process**: [INT8](#int8-static-vs-dynamic-scales). **Tokenization's share, the batch-1
  p50 and the server's start** are read straight off the rows and the [Run](#run) lines."""

NEGATIVE = """\
The fused step less the in-process call is below zero where the two cells, minutes apart, met different loads on the
host: the in-process cell was the slower one."""

DEFAULT_RULE = """\
`build` with no `--layout` gives each model the first of these that fits it
(`ernie_deploy/repository/layouts/__init__.py`, `DEFAULT_LAYOUTS`):

| model step runs on | default | else |
|---|---|---|
| python backend (pip-only machine) | `fused` | `ensemble` (`--cache`, `--classic`) |
| ONNX Runtime backend (NGC container, GPU) | `graph-postprocess` (classifiers) | `ensemble` (token models) |

**The rule on the python model step: the layout with the fewest process hops.** Every hop between Triton models is a
round trip through the python backend's shared memory and a stub process (the ensemble's tokenizer and postprocess
steps [above](#targets-where-they-stand-and-why)), and on 2 cores the three-step ensemble's extra processes buy
overlap only when the model itself is large. The main run serves every model both ways, each served alone:"""

DEFAULT_ORT = """\
Where a model or a machine differs, `ernie-deploy tune` measures the layouts on it
([Tune a model on your machine](#tune-a-model-on-your-machine)).

**On the ORT backend** the model step runs in C++ (no python stub), so the hops left are python ones: the tokenizer
always, and the postprocess unless it is in the graph. `graph-postprocess` leaves one (the tokenizer) for a
classifier; `fused` and `tokenizer-in-model` cannot run there (they run onnxruntime inside a python model). This
choice follows from the hop count and is not measured here, since the pip server has no ORT backend:
`bash scripts/bench.sh levers --lever graph-postprocess` in the NGC container measures it."""

# PaddleNLP's published accuracy of the fine-tuned ERNIE 3.0 checkpoints (model_zoo/ernie-3.0/README.md, 模型效果:
# CLUE dev sets): figures of theirs, quoted, so they live here and not in a results file.
CLUE = {
    "nano": (62.97, 54.57, 48.36),
    "mini": (66.90, 55.24, 54.48),
    "medium": (72.49, 57.00, 60.67),
    "base": (76.05, 58.26, 61.56),
}

SIZES_PICK = """\
Speed is the main run's [Sizes](#sizes) table (random weights: speed only). Accuracy is PaddleNLP's, published for
its fine-tuned checkpoints (its `model_zoo/ernie-3.0/README.md`, section 模型效果: CLUE dev sets), not measured
here. TNEWS is news-title classification, the closest published task to the demo's THUCNews titles; micro (4 × 384,
CLUE 64.21) is in `--sizes` too and sits between nano and mini."""

INT8 = """\
`convert --quantize int8` makes static INT8 (`int8-static`): INT8 MatMul weights and UINT8 activations at scales
fixed once by calibration, so a text's answer never depends on the texts the server batches it with;
`--quantize int8-dynamic` scales each batch by its own range instead
([RELIABILITY.md](RELIABILITY.md#answers-independent-of-neighbours)). The main run ({date}) times static INT8, of the
plain graph and of `convert --optimize`'s, in-process against FP32 at each one's best batch: the INT8 rows of each
model's table, and their ratios in the [Targets](#targets) table (target 1.5×). The run does not score accuracy:
`tests/test_quantize.py` gates every INT8 model within a point of FP32's accuracy and entity F1.

No benchmark here times dynamic INT8: static is the default for its answers, not for its speed. What was tried for
static INT8 and kept (weight MatMuls only, UINT8 activations, MinMax calibration on 256 texts, the QOperator format),
and how it compared with dynamic INT8, is noted in `ernie_deploy/export/precision.py`."""

TUNE = """\
The default is a rule over measurements on one machine; `ernie-deploy tune --model NAME` measures the model you serve
on the machine you serve it on:

```bash
ernie-deploy tune --model ernie_seqcls --budget 10               # highest throughput at concurrency 8
ernie-deploy tune --model ernie_seqcls --p99-ms 30               # ... whose p99 stays under 30 ms
ernie-deploy tune --model ernie_seqcls --objective latency       # lowest p50 of a lone request
ernie-deploy tune --model ernie_seqcls --dimensions instances,ort_threads --no-version  # two settings, nothing written
```

It reads the model's record from the repository (its layout and build options), then searches layout, instances,
onnxruntime threads, spinning, queue delay and max batch: each trial builds the model alone with those options,
serves it on a real tritonserver and loads it with perf_analyzer (the asyncio generator where perf_analyzer is not
installed) for `--duration` seconds. The search is coordinate descent from the served settings: one dimension at a
time, each value tried with the others at the best so far, the best kept: 15 trials for the six dimensions instead of
their 324 combinations. `--budget MINUTES` stops it before a trial that the average trial so far says would end past
the budget (the table says how many were left out); a progress bar shows the last trial and the time left. The table
is printed and saved (`artifacts/reports/tune/NAME.json`, on the machine that ran it: no tune run's table is on this
page), and a winner at least 5% better than the served settings (`--min-gain`) is written as a new version of the
model, its serving settings in its record (`model.json` in its folder, [MODELS.md](MODELS.md#versions-and-rollout)),
which `ernie-deploy rollout --model NAME --to N` puts live and `rollback` undoes. A winner in another layout, or for a
model whose tokenizer step is shared with other models, is a rebuild instead: `tune` prints the `build` command. Tune
where the model or the machine differs from the main run's (a larger model, cores the server owns, where spinning
pays). Model Analyzer does this for plain Triton models; it knows no layouts and wants the GPU container."""


def main_run(results) -> list[str]:
    bench = results(BENCH)
    intro = "Between the `bench` markers is what `bash scripts/bench.sh` writes itself from docs/bench.json: "
    intro += "the run, its targets, the sizes, each model's rows and the plots."
    # The marked block is exactly what benchmarks.markdown.update_markdown puts there, so a run of the benchmark and
    # this page agree on it.
    marked = f"{BEGIN_MARK}\n{render_generated(bench).strip()}\n{END_MARK}"
    return ["## The main run", "", MAIN_RUN, "", MAIN_COMMANDS, "", wrap(intro), "", marked]


def _cell(results, task: str, kind: str, concurrency: int):
    return next((r for r in rows_of(results, task, kind) if r.concurrency == concurrency and r.batch == 1), None)


def _step_part(name: str) -> str:
    """Which of the ensemble's steps a Triton model is: its tokenizer (shared, so named on its own), its
    postprocess, or its model."""
    if "tokenizer" in name:
        return "tokenizer"
    return "postprocess" if name.endswith("_postprocess") else "model"


def _fused_step(row) -> dict | None:
    """The one step of a served row whose pipeline is one Triton model (the fused layout), else None."""
    steps = row.steps if row else None
    return next(iter(steps.values())) if steps and len(steps) == 1 else None


def targets_why(results) -> list[str]:
    bench = results(BENCH)
    rows, added = [], []
    for task in bench.get("tasks", {}):
        fused, fused8 = _fused_step(_cell(bench, task, SERVED, 1)), _fused_step(_cell(bench, task, SERVED, 8))
        alone = next((r for r in rows_of(bench, task, LIMIT_TOK) if r.batch == 1), None)
        ens, ens8 = _cell(bench, task, ENSEMBLE, 1), _cell(bench, task, ENSEMBLE, 8)
        parts = {_step_part(n): s for n, s in (ens.steps or {}).items()} if ens else {}
        parts8 = {_step_part(n): s for n, s in (ens8.steps or {}).items()} if ens8 else {}
        if fused and alone:
            added.append(fused["compute_ms"] - alone.p50_ms)
        rows.append(
            [
                task,
                f"{fused['compute_ms']:.2f} ({fused['queue_ms']:.2f})" if fused else "–",
                f"{fused['compute_ms'] - alone.p50_ms:+.2f}" if fused and alone else "–",
                " / ".join(f"{parts[p]['compute_ms']:.2f}" for p in ("tokenizer", "model", "postprocess"))
                if len(parts) == 3
                else "–",
                f"{sum(s['queue_ms'] for s in parts.values()):.2f}" if parts else "–",
                f"{fused8['texts_per_execution']:.1f}" if fused8 else "–",
                f"{parts8['model']['texts_per_execution']:.1f}" if "model" in parts8 else "–",
            ]
        )
    head = [
        "model",
        "fused step c1: compute (queue) ms",
        "fused step − in-process b1 with tokenization, ms",
        "ensemble c1 compute ms: tokenizer / model / postprocess",
        "ensemble c1 queues, ms",
        "c8 texts per execution: fused step",
        "c8 texts per execution: ensemble model step",
    ]
    return [
        "## Targets: where they stand, and why",
        "",
        WHY,
        "",
        *table(head, rows, "lrrrrrr"),
        *(["", wrap(NEGATIVE)] if added and min(added) < 0 else []),
        "",
        WHY_READ,
    ]


def default_layout(results) -> list[str]:
    bench = results(BENCH)
    rows, sooner, more = [], 0, 0
    for task, facts in bench.get("tasks", {}).items():
        served1, ens1 = _cell(bench, task, SERVED, 1), _cell(bench, task, ENSEMBLE, 1)
        served8, ens8 = _cell(bench, task, SERVED, 8), _cell(bench, task, ENSEMBLE, 8)
        if not (served1 and ens1 and served8 and ens8):
            continue
        shape = facts.get("shape")
        name = f"{task} ({shape['layers']} × {shape['hidden']})" if shape else task
        rows.append([name, signed(served1.p50_ms - ens1.p50_ms, unit=""), ratio(served8.throughput / ens8.throughput)])
        sooner += served1.p50_ms < ens1.p50_ms
        more += served8.throughput > ens8.throughput
    fused = all(_fused_step(_cell(bench, t, SERVED, 1)) for t in bench.get("tasks", {}))
    default = "default build (fused)" if fused else "default build"
    head = ["model", f"{default} − ensemble: c1 p50 ms", f"{default} / ensemble: c8 throughput"]
    summary = (
        f"The {default} answered a lone request sooner than the ensemble for {sooner} of the {len(rows)} models and "
        f"did more at concurrency 8 for {more} (p50 and throughput of both are each model's rows above)."
    )
    return [
        "## The default layout",
        "",
        DEFAULT_RULE,
        "",
        *table(head, rows, "lrr"),
        "",
        wrap(summary),
        "",
        DEFAULT_ORT,
    ]


def sizes_pick(results) -> list[str]:
    bench = results(BENCH)
    sized = [(shape["size"], best_row(bench, name, LIMIT_TOK)) for name, shape in sized_models(bench)]
    sized = [(size, row) for size, row in sized if row and row.throughput]
    steps = [a.throughput / b.throughput for (_, a), (_, b) in zip(sized, sized[1:])]
    clue = [(size, CLUE[size]) for size, _ in sized if size in CLUE]
    gains = ", ".join(f"+{b[0] - a[0]:.2f} {x} → {y}" for (x, a), (y, b) in zip(clue, clue[1:]))
    rows = [[size, *(f"{v:.2f}" for v in scores)] for size, scores in clue]
    read = [
        f"- **Each step up costs {min(steps):.1f}-{max(steps):.1f}× the in-process time per text** (the limit+tok "
        "column "
        f"of [Sizes](#sizes), {' → '.join(size for size, _ in sized)}), and buys accuracy: {gains} CLUE points. On "
        "TNEWS the spread is smaller: a short-text classifier with a clear label set loses less by going small than "
        "the average suggests.",
        "- **Budget the CPU, not the latency.** A rate of R texts a second needs about R × the server CPU ms per "
        "text (the c8 column of [Sizes](#sizes)) of CPU; under load the p99 grows with the queue (its p99 column).",
        "- **Pick the smallest size whose accuracy on your own dev split is good enough, then INT8** "
        "([INT8](#int8-static-vs-dynamic-scales)), and send several texts per request where the client can (the "
        '"batched requests" column).',
        "- **The smaller the model, the more the layout matters**: its fixed cost per request is a larger share "
        "([The default layout](#the-default-layout)).",
    ]
    head = ["size", "CLUE avg (10 tasks)", "TNEWS", "IFLYTEK"]
    return ["## Sizes: which one to pick", "", SIZES_PICK, "", *table(head, rows, "lrrr"), "", wrap("\n".join(read))]


def int8(results) -> list[str]:
    """INT8: what the main run times of it, and where the choice of static scales is argued."""
    return ["## INT8: static vs dynamic scales", "", wrap(INT8.format(date=results(BENCH)["date"]))]


def optimizer_ratios(results) -> str:
    """`convert --optimize` against the plain graph in the main run, best in-process cell of each: a sentence."""
    bench = results(BENCH)
    parts = []
    for task in bench.get("tasks", {}):
        best = {k: best_row(bench, task, k) for k in (LIMIT, LIMIT_OPT, LIMIT_INT8, LIMIT_INT8_OPT)}
        if all(best.values()):
            fp32 = best[LIMIT_OPT].throughput / best[LIMIT].throughput
            q8 = best[LIMIT_INT8_OPT].throughput / best[LIMIT_INT8].throughput
            parts.append(f"{task} {ratio(fp32)} FP32, {ratio(q8)} INT8")
    return "; ".join(parts)


def tune(results) -> list[str]:
    return ["## Tune a model on your machine", "", TUNE]
