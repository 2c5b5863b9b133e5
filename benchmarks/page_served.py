"""The sections of docs/BENCHMARKS.md on what a served feature costs: monitoring
(docs/monitoring.json), every label's probability (docs/scores-cost.json) and shadow evaluation (docs/shadow.json);
then the load generators, which no results file here compares."""

from __future__ import annotations

import statistics

from benchmarks.page_parts import ratio, run_lines, signed, spread, table, wrap

MONITORING = """\
The monitoring benchmark builds the bootstrap classifier four times into one repository from the same artifacts: in
the default layout (fused, python runtime) and in the ensemble, each watched (`build`'s default: the step that
answers counts each text's label, confidence, length and reading, and pushes the counts to /metrics once a second)
and with `build --no-monitor`. One tritonserver serves all four. It measures each pair two ways:

- **rounds**: every cell driven by the closed loop of `bench/load.py` (one text a request), concurrency 1 for latency
  and 8 for throughput, the unwatched and the watched model back to back in an order that flips every round; each
  cell keeps its best round, and the ratios paired within each round are in the file with their median;
- **interleaved**, the figures to read on a shared host: at concurrency 1 one request to each model in turn (1,500
  pairs, the first of a pair alternating), each model's p50; at concurrency 8 four closed loops on each model at once
  for 20 s, each model's texts/s while they share the cores. Both models see the same moments of the host, so its
  drift cancels out.

It checks that the watched models counted every text they answered on /metrics and the unwatched ones none, reads
/metrics for its size, and times the watch's own work in process (timeit on the fused step's real inputs and
outputs). The targets are the file's: c8 throughput watched / unwatched {c8:g}× or more, c1 p50 at most
+{c1:g} ms."""

MONITORING_READ = """\
- **Nothing per request talks to Triton:** the watch adds its counts under one lock, with the counter keys made once
  at load, and the pushes to /metrics run once a second on the watch's own thread.
- **Served, the host decides more than the watch.** With two cores and several runnable processes, a 2% or 0.1 ms
  difference is inside what moves between measurements, so the served rows bound the cost (no large regression)
  rather than show a target met or missed; the in-process figures are the cost.
- **The ensemble** hands its postprocess the request's texts and the tokenizer's `truncated` as well when watched
  (for the lengths and readings): two more tensors into the postprocess's stub a request."""

SCORES = """\
A classifier answers `probabilities` and `logits` only for a request that names them ([TASKS.md](TASKS.md)); one that
does not is answered its label and that label's probability. The scores-cost benchmark (benchmarks/scores_cost.py)
builds the bootstrap classifier twice per layout (fused and ensemble, python runtime) from the same ONNX model and the
same dev-split reference profile: by this checkout ("after") and by the source tree of the last revision whose
classifiers answered only their label and its probability ("before", `--before`, taken with `git archive`; its
server's steps import that tree's package). Both servers run side by side, each idle while the other is loaded. In
each round every cell (one text a request, the closed loop of `bench/load.py`) is driven for **before**, **after**
(the request the project's clients send) and **after, asked** (the request of `--all-scores`), in an order that turns
each round; each cell keeps its best round. Then each build's fused step is timed in its own tree's python
(`Step.run_requests` as the stub calls it, the request naming what the clients name; 400 test titles, one request a
call and 8 merged into a call, 5 turns in alternation, each the best of 3 passes)."""

SCORES_NOTE = """\
perf_analyzer names every output a model declares in its requests (Triton's verbose log shows them as the request's
requested outputs), so its rows for a classifier include the probabilities and logits; the asyncio load generator
names what the project's clients name ([Load generators](#load-generators))."""

SHADOW = """\
`python -m benchmarks.shadow_cost` serves a copy of a repository holding the bootstrap classifier at two versions
(fused, python runtime; the second built by `ernie-deploy build --model ernie_seqcls --version 2` from the same
artifacts), loads the candidate beside the serving version as `rollout` does for every cell, and alternates the
shadow off and on in rounds: concurrency 1 (p50) and concurrency 8 (texts/s), one text a request, `--duration`
seconds a cell."""

LOAD_GENERATORS = """\
The served rows are driven by perf_analyzer (Triton's C++ load generator, 2.41.0 from the tritonclient wheel:
`bash scripts/install_perf_analyzer.sh`) when it is installed, else by the built-in asyncio generator;
`--load-generator both` measures every served cell with each in turn on the same server, and the main run then adds a
table of the two side by side to its section. perf_analyzer runs three windows of a third of the cell each, taken as
they come (its stabilization loop would make a cell's length unbounded, and on a busy host it exits without a result),
after the same warm-up. Client CPU is the generator's own a request: the Python process's for asyncio, perf_analyzer's
process (a waited-for child's rusage) divided by every request the server answered while it ran. Both share the
server's cores, so the cheaper client takes less from the server it measures. The asyncio generator names in each
request the outputs the project's clients name; perf_analyzer names every output the model declares, which for a
classifier includes the `probabilities` and `logits` computed on request only
([their cost](#every-labels-probability-its-cost-to-clients-that-do-not-ask)).

No results file of a side-by-side run is kept in docs/, so this page has no figures of it. The measurement, on the
classifier served as an ensemble:

```bash
ernie-deploy build --task seq_cls --layout ensemble --repository artifacts/ensemble
bash scripts/bench.sh --task seq_cls --repository artifacts/ensemble --load-generator both --concurrency 1,8,16 \\
  --duration 5 --no-paddle --no-classic --no-ensemble --no-int8 --no-peer --sizes none --client-batch 1 \\
  --batch-sizes 1 --inproc-duration 1 --out artifacts/load-generators
```"""


def monitoring(results) -> list[str]:
    record = results("monitoring.json")
    targets, settings = record["targets"], record["settings"]
    order = {"default": 0, "ensemble": 1}
    kept = sorted(record["best"], key=lambda r: (order.get(r["layout"], 2), r["concurrency"], r["variant"]))
    head = ["layout", "model", "concurrency", "texts/s", "p50 ms", "p99 ms", "server CPU ms/text", "load average"]
    rows = [
        [
            r["layout"],
            r["variant"],
            r["concurrency"],
            f"{r['texts_per_s']:.1f}",
            f"{r['p50_ms']:.2f}",
            f"{r['p99_ms']:.2f}",
            "" if r["server_cpu_ms_per_text"] is None else f"{r['server_cpu_ms_per_text']:.2f}",
            " / ".join(f"{v:.2f}" for v in r["load_average"]),
        ]
        for r in kept
    ]
    inter = []
    for layout, i in record["interleaved"].items():
        m = record["ratios"][layout]["paired_median"]
        inter.append(
            [
                layout,
                f"{i['unwatched']['c1_p50_ms']:.3f} -> {i['watched']['c1_p50_ms']:.3f} ms "
                f"(**{signed(i['c1_p50_added_ms'])}**)",
                f"**{ratio(i['c8_ratio'], 3)}** ({i['watched']['c8_texts_per_s']:.1f} vs "
                f"{i['unwatched']['c8_texts_per_s']:.1f} texts/s)",
                ratio(m["c8_throughput_ratio"], 3),
                signed(m["c1_p50_added_ms"]),
                " / ".join(f"{v:.2f}" for v in i["load_average"]),
            ]
        )
    inter_head = [
        "layout",
        "interleaved c1 p50, unwatched -> watched",
        "c8 sharing the cores, watched / unwatched",
        "rounds: c8 paired median",
        "rounds: c1 p50 paired median",
        "load average, interleaved",
    ]
    inproc = record["in_process"]
    w, step = inproc["watch_us"], inproc["fused_step_us"]
    cost = (
        f"- **In process, where it can be measured:** the watch's work for a one-text request (`Watched._observe`: "
        f"reading the answer, its series, the text's length and reading, then adding the counts) takes "
        f"**{w['observe_and_count']:.1f} µs** (observe {w['observe']:.1f}, adding the counts {w['count']:.1f}), "
        f"{100 * w['observe_and_count'] / step['unwatched']:.1f}% of the fused step's {step['unwatched']:,.0f} µs a "
        f"lone text. The whole fused step timed with the watch off and on over {inproc['texts']} texts: "
        f"{step['unwatched']:,.0f} µs and {step['watched']:,.0f} µs ({signed(inproc['fused_step_added_us'], 0, ' µs')})"
        + (
            ": the watched step timed faster, so the noise of timing the whole step is larger than the watch's work."
            if inproc["fused_step_added_us"] < 0
            else "."
        )
    )
    scrape = record["scrape"]["after_load"]
    watched = len(scrape["watch"]["per_model"])
    families = ", ".join(f"{n // watched} `{f}`" for f, n in scrape["watch"]["per_family"].items())
    per_model = spread([v["bytes"] / 1000 for v in scrape["watch"]["per_model"].values()], lambda v: f"{v:.1f}")
    scraped = (
        f"What a scrape carries: with {watched} watched models loaded, /metrics is {scrape['with_watch']['bytes']:,} "
        f"bytes and {scrape['with_watch']['series']} series after the load, of which the watch adds "
        f"{scrape['watch']['series'] // watched} series and {per_model} KB per watched model ({families}); without "
        "them "
        f"the scrape is {scrape['without_watch']['bytes']:,} bytes and {scrape['without_watch']['series']} series. A "
        "token model's or a multi-label model's count differs with its labels and series. The series exist from load, "
        "at 0, so the scrape's size does not grow with traffic."
    )
    return [
        "## Monitoring",
        "",
        wrap(MONITORING.format(c8=targets["c8_throughput_ratio"], c1=targets["c1_p50_added_ms"])),
        "",
        *run_lines(record, during=[r["load_average"] for r in record["rows"]], kept_as="monitoring.json"),
        f"- cells: {settings['rounds']} rounds, {settings['warmup_s']:g} s warm-up and {settings['duration_s']:g} s "
        f"measured a cell, {settings['texts']:,} texts",
        "",
        *table(head, rows, "llrrrrrl"),
        "",
        *table(inter_head, inter, "llllll"),
        "",
        wrap(cost),
        MONITORING_READ,
        "",
        wrap(scraped),
    ]


def scores_cost(results) -> list[str]:
    record = results("scores-cost.json")
    best = {(r["variant"], r["layout"], r["concurrency"]): r for r in record["best"]}
    layouts = list(dict.fromkeys(r["layout"] for r in record["best"]))
    variants = list(dict.fromkeys(r["variant"] for r in record["best"]))
    rows = [
        [layout, v, f"{best[(v, layout, 1)]['p50_ms']:.3f}", f"{best[(v, layout, 8)]['texts_per_s']:.1f}"]
        for layout in layouts
        for v in variants
    ]
    after = [q for q in record["ratios"] if q["variant"] == "after"]
    asked = [q for q in record["ratios"] if q["variant"] == "after, asked"]
    paired = [
        [
            q["layout"],
            f"{signed(q['c1_p50_added_ms'], 3)} ({signed(q['c1_p50_added_ms_paired'], 3)})",
            f"{ratio(q['c8_throughput_ratio'], 3)} ({ratio(q['c8_throughput_ratio_paired'], 3)})",
            f"{q['before_c8_round_spread']:.3f}",
        ]
        for q in after
    ]
    paired_head = [
        "layout",
        "after against before: c1 p50, best rounds (paired median)",
        "c8 throughput, best rounds (paired median)",
        "before's own c8 rounds, lowest / highest",
    ]
    us, added = record["fused_step_us_per_text"], record["fused_step_added_us_per_text"]
    noise = max(1 - q["before_c8_round_spread"] for q in after)
    inside = all(abs(q["c8_throughput_ratio_paired"] - 1) < noise for q in after)
    read = [
        f"- **Served at c8, after against before is {'inside' if inside else 'outside'} the spread of before's own "
        f"rounds** ({spread([1 - q['before_c8_round_spread'] for q in after], lambda v: f'{100 * v:.0f}%', '-')} "
        "between its lowest and highest c8 round).",
        f"- **In process, where it can be measured: {us['after']['c1']:.0f} against {us['before']['c1']:.0f} µs a text "
        f"(one request a call) and {us['after']['c8']:.0f} against {us['before']['c8']:.0f} µs (8 merged), after "
        f"against before: {signed(added['c1'], 1, ' µs')} and {signed(added['c8'], 1, ' µs')} a text, "
        f"{100 * added['c1'] / us['before']['c1']:.1f}% and {100 * added['c8'] / us['before']['c8']:.1f}%.** What a "
        "request that does not ask goes through in addition is two set lookups and the answers named picked out; the "
        "softmax was computed by before as well (its maximum is the confidence).",
        "- **Asking costs little:** after, asked read "
        + " and ".join(f"{ratio(q['c8_throughput_ratio_paired'])} ({q['layout']})" for q in asked)
        + " of before at c8 as paired medians, the logits and probabilities being a float per label each a text, "
        "serialized and sent.",
    ]
    return [
        "## Every label's probability: its cost to clients that do not ask",
        "",
        SCORES,
        "",
        *run_lines(record, during=[r["load_average"] for r in record["rows"]], kept_as="scores-cost.json"),
        f"- before: `{record['before']}`",
        "",
        *table(["layout", "variant", "c1 p50 ms", "c8 texts/s"], rows, "llrr"),
        "",
        *table(paired_head, paired, "lllr"),
        "",
        wrap("\n".join(read)),
        "",
        SCORES_NOTE,
    ]


def shadow(results) -> list[str]:
    record = results("shadow.json")
    cells = record["cells"]
    rounds = sorted({c["round"] for c in cells})
    by = {(c["round"], c["shadow"]): c for c in cells}
    rows, added, through = [], [], []
    for n in rounds:
        off, on = by[(n, "off")], by[(n, "on")]
        added.append(on["c1_p50_ms"] - off["c1_p50_ms"])
        through.append(on["c8_per_s"] / off["c8_per_s"])
        rows.append(
            [
                n,
                f"{off['c1_p50_ms']:.2f} -> {on['c1_p50_ms']:.2f} ms ({signed(added[-1])})",
                f"{off['c8_per_s']:.1f} -> {on['c8_per_s']:.1f} ({ratio(through[-1])})",
                on["mirrored"],
                on["skipped"],
                off["errors"] + on["errors"],
            ]
        )
    head = ["round", "c1 p50 off -> on", "c8 texts/s off -> on", "texts mirrored (on)", "skipped", "client errors"]
    mirrored = [by[(n, "on")]["mirrored"] for n in rounds]
    agree = {by[(n, "on")]["agreement"] for n in rounds}
    errors = sum(c["errors"] for c in cells)
    read = [
        f"- **c1 p50: {spread(added, lambda v: f'{v:+.2f}')} ms, median {signed(statistics.median(added))}.**",
        f"- **c8 throughput: median {ratio(statistics.median(through))}, mean {ratio(statistics.mean(through))}** "
        f"over the rounds, against the {ratio(1 - record['fraction'], 1)} the fraction predicts (the candidate runs "
        f"that share of the texts again on the same cores). The rounds move by {spread(through, ratio, '-')}, so the "
        "host's drift is larger than the cost: the run bounds it at about the fraction and does not resolve it "
        "further.",
        f"- {'Every client request was answered' if not errors else f'{errors} client requests failed'}; "
        f"{spread(mirrored, lambda v: f'{v:,}', '-')} texts mirrored a round with the shadow on, "
        f"{sum(by[(n, 'on')]['skipped'] for n in rounds)} skipped, and the versions' answers agreed on "
        + ", ".join(f"{a:.1%}" for a in sorted(agree))
        + " of them.",
    ]
    return [
        "## Shadow evaluation",
        "",
        SHADOW,
        "",
        "- command: `python -m benchmarks.shadow_cost --repository R --model ernie_seqcls --to 2 --rounds 4 --out "
        "docs/shadow.json`",
        "- the file records no date, machine or load (benchmarks/shadow_cost.py writes none)",
        f"- model {record['model']}: serving version {record['serving']}, candidate {record['candidate']}, shadow "
        f"fraction {record['fraction']:g}",
        "",
        *table(head, rows, "rllrrr"),
        "",
        wrap("\n".join(read)),
    ]


def load_generators(results) -> list[str]:
    return ["## Load generators", "", LOAD_GENERATORS]
