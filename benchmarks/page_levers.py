"""The sections of docs/BENCHMARKS.md on the served layout's options: the levers (docs/levers*.json), overload
(docs/overload.json) and the response cache (docs/cache.json)."""

from __future__ import annotations

import re

from benchmarks.cache import HOT_TEXTS
from benchmarks.levers import LEVERS, render_levers
from benchmarks.overload import P99_BOUND
from benchmarks.page_parts import ratio, run_lines, table, wrap
from benchmarks.page_run import optimizer_ratios

# (heading, results file, what the run was): the levers runs, each a table of its own.
LEVER_RUNS = (
    ("Every lever, on the demo classifier", "levers.json", ""),
    ("Levers on the ERNIE 3.0 shapes", "levers-sizes.json", ""),
    ("Spinning", "levers-spinning-2.json", ""),
    (
        "Spinning, with one core busy",
        "levers-spinning-busy.json",
        "The same command while other work held one core, which the file's name records; the file itself keeps "
        "the load average at the start only.",
    ),
    ("Fused, with and without spinning", "levers-fused-spinning.json", ""),
)

# A results file records a lever's options as `build` spelled them when it ran; a row is named by the options that
# make it today, so that it can be rebuilt as shown (LEVERS' names).
SPELLINGS = {
    ("fused", True): ("layout", "fused"),
    ("graph_postprocess", True): ("layout", "graph-postprocess"),
    ("ort_spinning", True): ("ort_spinning", "always"),  # a boolean that meant onnxruntime's default: "always"
}

LEVERS_INTRO = """\
What moves the served numbers, and by how much. Each lever is an `ernie-deploy build` option, so every row can be
rebuilt and measured again: `bash scripts/bench.sh levers` serves one repository per option, one after the other in
the same run, and writes levers.json (`--lever OPTION` measures some, `--sizes` adds the ERNIE 3.0 shapes). Each row
is the ensemble layout with one option changed (a layout option: that layout instead), so × is against the ensemble
with every option at its default, the first row of the same run: read the ratios between rows, taken under the same
load, rather than the rates. Throughput in seq/s, one text a request; rows are named by the `build` options that make
them."""

LEVERS_READ = """\
- **Ragged batching (default).** Triton's dynamic batcher merges only requests whose inputs have the same shape;
  titles tokenize to different lengths, so without `allow_ragged_batch` it merges little. With ragged inputs the
  python steps take whatever is queued and pad it together in one onnxruntime run (the texts per execution
  [above](#targets-where-they-stand-and-why)); the `--no-ragged` row is what that gives.
- **Length buckets (`--pad-to-multiple-of 16`, not the default).** Buckets make requests batchable, but every request
  pays for up to 15 pad tokens. Ragged inputs batch without the padding, so buckets are for model steps that cannot
  take ragged input: the ORT backend in the NGC container, where a GPU may profit more from the bigger batches than
  it loses to padding (not measured here: no GPU).
- **One merged run per `execute` (default).** The python steps run every request of an `execute` as one batch (a
  bad request isolated with its own error), not the tokenizer, onnxruntime and the postprocess once per request. It
  is not an option, so no row measures it.
- **onnxruntime spinning off (default).** By default onnxruntime's idle worker threads busy-wait; inside the server
  they burn the cores the other steps and processes need. `--ort-spinning run` (onnxruntime's
  `session.force_spinning_stop`: threads busy-wait inside a run and sleep between runs) and `--ort-spinning always`
  are measured by the same command with the cores free and with one busy (the two spinning tables). Spinning helps
  a server that owns its cores and costs one that shares them, and a server shares its cores with its own steps'
  processes, with other containers on a node, and under a Kubernetes CPU limit a spinning thread spends the quota.
  `off` is the robust default; `--ort-spinning always` is for a server that owns its cores, measured there first.
  The in-process limit rows keep onnxruntime's default (spinning on), the setting for a process alone on its cores.
- **Threads and instances.** One model instance with onnxruntime's default threads is the default.
  `--ort-threads 1` and two single-threaded instances depend on what else the cores do and on the model's size (a
  larger model's matrix products do use both cores), so they stay options; on two cores, instances take turns.
- **Queue delay (not used).** `--max-queue-delay-us 1000` makes every lone request wait the full delay, and under
  load the queue fills on its own while the model runs. Preferred batch sizes only matter with a delay, so none are
  set.
- **Warmup (default).** A `model_warmup` request per step (a real text for the tokenizer, zeros for the tensors)
  runs each python step's first `execute` before the server reports ready, so the first request costs about what
  the later ones do (the first-request times under [Run](#run)).
- **Fused layout (`--fused`, the default on the python runtime).** Tokenizer, onnxruntime and postprocess in one
  python model under the model's name: two hops between processes fewer a request
  ([The default layout](#the-default-layout)). It answers in the ensemble's tensors, so clients do not change, and it
  needs onnxruntime inside the python backend. What it gives up: the model step cannot move to the ORT backend or a
  GPU (there the default is `graph-postprocess` or the ensemble), `stats` cannot say which part of the one step the
  time went to, and `--cache` takes the ensemble (Triton would cache a fused model's refusals as answers). Versions
  and rollout work as in every layout: a fused model keeps its versions in `<name>/<N>/`, and its canary is a copy
  of the model holding the new version.
- **Postprocess in the graph (`--graph-postprocess`, classifiers; their default on the ORT backend).** `build`
  appends Softmax, ArgMax, ReduceMax and an `ai.onnx.ml` LabelEncoder to the converted graph
  (repository/postprocess_graph.py), so the model step answers `label_id`, `label` and `confidence` and the ensemble
  is tokenizer -> model: one python hop fewer, and on the ORT backend one python hop in all. Same answers (labels
  equal, confidences within 1e-5, tests/test_layouts_served.py). On the python runtime `--fused` leaves fewer hops
  still, so it is the default there.
- **Tokenizer in the model step (`--tokenizer-in-model`, an option).** Tokenizer and onnxruntime in one python
  model, the postprocess a step of its own: between the ensemble and `--fused`. It gives up the shared tokenizer and
  the ORT backend, so it stays an option for comparison (`--lever tokenizer_in_model`; no results file here holds a
  run of it).
- **Tokenization.** The serving tokenizer (Rust `tokenizers`) is not where served time goes: its share is in the
  limit rows with tokenization.
- **Response cache (`build --cache`, off by default)**: [Response cache](#response-cache).
- **Client side.** The load generator spends CPU on the same two cores as the server (the "client CPU" column);
  several texts per request spread it, and every per-request cost of the server (the "texts per request" rows).
- **onnxruntime's transformer optimizer (`convert --optimize`, an option, not a default).** As exported,
  paddle2onnx's graph fuses LayerNorm, SkipLayerNorm and BiasGelu but no attention: paddle2onnx scales the query
  before the QK MatMul and builds the mask as `Cast(Equal(input_ids, pad)) * -1e4 + 0`, neither of which
  onnxruntime's matcher takes. `export/optimize.py` rewrites both into the matched form (same values) and then every
  block fuses (`Attention` × layers, 2D mask), under the same parity gate. onnxruntime's own session optimizations
  (ORT_ENABLE_ALL, what the model step uses) already fuse LayerNorm, Gelu and MatMul+Add when the plain graph loads,
  so the offline pass only adds the attention core, which is small for short texts: per layer the score and context
  products cost about 4·S²·H multiply-adds against 12·S·H² for the projections and the feed-forward, a share of
  S/(3H). The main run times both graphs in-process; optimized over plain, best cells: {optimizer}. It stays an
  option, for GPUs, where onnxruntime's fused Attention kernels are the point, and for longer inputs (not measured
  here)."""

OVERLOAD = """\
The overload benchmark measures the served capacity (closed loop, 16 clients), then offers 1x, 2x and 4x that rate in
an open loop (requests sent on a schedule, whatever the answers: how traffic from many independent users arrives) to
one queue policy after another. A bound on the queues is a `build` option: `--max-queue-size N` refuses a request when
N wait in a step's queue, `--queue-timeout-us T` refuses one that waited T; either way the answer is `UNAVAILABLE`
(`Exceeds maximum queue size`, `Request timeout expired`), which the client retries with jittered backoff. The
policies are no bound and the candidates for a default bound (`POLICIES` in benchmarks/overload.py), each built as an
ensemble with its options.

**What drives the load** follows `--load-generator`: perf_analyzer where it is installed (its asynchronous mode and
`--request-rate-range` for the open loop: in its synchronous mode at most `--max-threads` requests are in flight, so
an overload turns into a closed loop). perf_analyzer 2.41 stops at the first refused request, and offered more than
it keeps up with it does not end, holding more and more memory; a run is stopped past 512 MiB or 10 times the
duration (at least 60 s). Either way the policy is measured again, all of its multiples, by the Python generator (the
table marks those rows †), so each policy's rows, and its p99 ratios to 1x, come from one tool
(`ernie_deploy/bench/perf_analyzer_rate.py` has what was measured of perf_analyzer). **Answered and refused are the
server's counts** (its statistics for the entry model, whatever drove the load), since perf_analyzer counts no
refusal; Triton counts each failed ensemble request twice, so the count is halved, and a model that is not an
ensemble does not count a full-queue refusal, so there the Python generator's count is used
(`ernie_deploy/server/stats.py`). `ernie-deploy stats` shows the same counts.

**The best policy** (`best_policy`) is the one whose answered p99 at 2x and at 4x stays within {bound}x its own p99 at
1x, answering the most past capacity; none, when no policy does."""

OVERLOAD_READ = """\
- **Without a bound a queue past capacity only grows**, and with it every answer's wait: the no-bound rows' p99
  against 1x.
- **A bound answers what it can in time and refuses the rest at once**; a queue-size bound counts requests, not
  their wait, and the dynamic batcher drains many requests a run, so it refuses at capacity already.
- **A row marked † was driven by the Python generator**, which shares the server's cores and spends CPU on every
  refusal; a load generator that goes on past refusals, on another machine, would measure the bounded policies
  without taking from the server.
- `build` sets no bound by default. A deployment that prefers refusals to waiting builds with `--queue-timeout-us`,
  its value measured on its own host."""

CACHE = """\
The cache benchmark builds the bootstrap classifier twice in one repository, as the default build and with
`build --cache` (the ensemble, the default layout that caches), so the ratio is what adding `--cache` gives. It serves
both from one server and drives each the same way (closed loop, {clients} clients, one text a request, every request
sent once, cold cache) with three workloads of {requests:,} requests over the test titles, each on texts the others
never sent: **repeated**, a Zipf draw (s = {zipf}) over one half of them; **unique**, the other half, then the same
titles with a number appended, so that no text comes twice; **half repeated**, every other request one of {hot} hot
titles, the others new each time, so that about half the requests hit."""


def _relabelled(rows: list[dict]) -> list[dict]:
    names = {tuple(sorted(options.items())): name for name, options in LEVERS.items()}
    out = []
    for r in rows:
        options = dict(SPELLINGS.get((k, v), (k, v)) for k, v in r["options"].items())
        out.append({**r, "lever": names.get(tuple(sorted(options.items())), r["lever"])})
    return out


def levers(results) -> list[str]:
    lines = ["## Levers", "", LEVERS_INTRO]
    for heading, name, what in LEVER_RUNS:
        record = results(name)
        lines += ["", f"### {heading}", ""]
        lines += [wrap(what), ""] if what else []
        lines += [*run_lines(record, kept_as=name), "", render_levers(_relabelled(record["rows"]))]
    lines += ["", "### What each lever does, and the default", ""]
    return lines + [wrap(LEVERS_READ.format(optimizer=optimizer_ratios(results)))]


def _closest(rows: list[dict]) -> str | None:
    """The policy whose worst answered p99 past capacity is the smallest multiple of its own p99 at 1x."""
    worst = {}
    for policy in dict.fromkeys(r["policy"] for r in rows):
        mine = [r for r in rows if r["policy"] == policy]
        base = next(r["p99_ms"] for r in mine if r["multiple"] == 1.0)
        worst[policy] = max(r["p99_ms"] / base for r in mine if r["multiple"] > 1.0)
    return min(worst, key=worst.get) if worst else None


def _overload_table(rows: list[dict]) -> list[str]:
    """Per policy and load: the tool, the answered and refused shares (the server's counts) and the answered
    requests' latency, with p99 against the same policy's p99 at capacity (1x); a policy that perf_analyzer could not
    measure marked †, with why under the table."""
    at_capacity = {(r["policy"], r["task"]): r["p99_ms"] for r in rows if r["multiple"] == 1.0}
    head = ["policy", "task", "offered", "tool", "answered/s", "answered", "refused", "p50 ms", "p99 ms"]
    cells, why = [], {}
    for r in rows:
        base = at_capacity.get((r["policy"], r["task"]))
        tool = r.get("tool", "python")
        if r.get("note"):
            tool += "†"
            # a note names perf_analyzer's own message in brackets; the reason is what stands around it
            reason = re.sub(r" \(.*\)", "", r["note"])
            why.setdefault(reason, []).append(r["policy"])
        cells.append(
            [
                r["policy"],
                r["task"],
                f"{r['multiple']:g}x ({r['offered_per_s']:.0f}/s)",
                tool,
                f"{r['answered_per_s']:.0f}",
                f"{r['answered_share']:.0%}",
                f"{r['refused_share']:.0%}",
                f"{r['p50_ms']:.1f}",
                f"{r['p99_ms']:.1f}",
                f"{r['p99_ms'] / base:.2f}" if base else "–",
            ]
        )
    notes = [f"† {reason}: {', '.join(dict.fromkeys(policies))}." for reason, policies in why.items()]
    lines = table([*head, "p99 / p99 at 1x"], cells, "llrlrrrrrr")
    for note in notes:
        lines += ["", wrap(note)]
    return lines


def overload(results) -> list[str]:
    record = results("overload.json")
    rows = record["rows"]
    best = record.get("best_policy")
    if best:
        verdict = f"**Best policy: {best}.**"
    else:
        verdict = (
            f"**Best policy: none**: no policy kept its answered p99 within {P99_BOUND:g}x of its 1x value at both 2x "
            f"and 4x; the closest was {_closest(rows)}."
        )
    return [
        "## Overload",
        "",
        OVERLOAD.format(bound=f"{P99_BOUND:g}"),
        "",
        *run_lines(record, kept_as="overload.json"),
        f"- load generator: {record.get('perf_analyzer', 'the Python generator')}",
        "",
        *_overload_table(rows),
        "",
        wrap(verdict),
        "",
        OVERLOAD_READ,
    ]


def cache(results) -> list[str]:
    record = results("cache.json")
    rows = record["rows"]
    head = ["workload", "cache", "requests", "distinct texts", "texts/s", "p50 ms", "p99 ms", "hit rate"]
    cells = [
        [
            r["workload"],
            r["cache"],
            r["requests"],
            r["distinct_texts"],
            f"{r['texts_per_s']:.1f}",
            f"{r['p50_ms']:.1f}",
            f"{r['p99_ms']:.1f}",
            f"{r['hit_rate']:.1%}",
        ]
        for r in rows
    ]
    q = record["ratios"]
    rep, half, uniq = q["repeated"], q["half repeated"], q["unique"]
    # With a share h of hits free and every miss costing what a request costs with the cache (the unique workload's
    # ratio), the throughput is at most 1 / (1 - h) times that ratio.
    bound = uniq["throughput_ratio"] / (1 - half["hit_rate"])
    read = [
        f"- **Repeated texts: {ratio(rep['throughput_ratio'])} the throughput, p50 latency "
        f"{ratio(rep['p50_ratio'])}**, with {rep['hit_rate']:.1%} of the requests answered from the cache.",
        f"- **Half repeated: {ratio(half['throughput_ratio'])} at a {half['hit_rate']:.1%} hit rate. The target of 3× "
        "at 50% is not met, and cannot be:** with a share h of the requests hits and the misses costing what a "
        f"request costs with the cache (the unique workload), the throughput is at most 1 / (1 − h) times the unique "
        f"workload's ratio, {ratio(bound)} here, and hits are not free (the lookup, the copy, the gRPC round trip). "
        "3× needs a hit rate of at least 67% with free hits and misses that cost nothing extra.",
        f"- **Unique texts: {ratio(uniq['throughput_ratio'])}**: what the cache costs where nothing repeats, a lookup "
        "and an insert a miss, and the layout, since `--cache` takes the ensemble "
        "([The default layout](#the-default-layout)).",
    ]
    during = [r["load_average"] for r in rows]
    text = wrap(
        CACHE.format(clients=rows[0]["concurrency"], requests=rows[0]["requests"], zipf=record["zipf_s"], hot=HOT_TEXTS)
    )
    return [
        "## Response cache",
        "",
        text,
        "",
        *run_lines(record, during=during, kept_as="cache.json"),
        f"- model: {record['model']}",
        "",
        *table(head, cells, "llrrrrrr"),
        "",
        wrap("\n".join(read)),
        "",
        wrap(
            "So `--cache` pays where texts come back often (repeated headlines, retries, polling clients), costs "
            "throughput where they do not, and stays off by default; a cache also holds answers (and texts, in its "
            "keys) in the server's memory."
        ),
    ]
