"""The section of docs/BENCHMARKS.md on a lone request's path through the served fused classifier
(docs/lone-request.json, `python -m benchmarks.lone_request`)."""

from __future__ import annotations

from benchmarks.page_parts import ratio, run_lines, shown_command, signed, table, wrap

INTRO = """\
`python -m benchmarks.lone_request` serves the demo classifier in the default build on the python runtime (fused: one
python model holds the tokenizer, onnxruntime and the postprocess), sends it one request of one text at a time over
gRPC (tritonclient's synchronous client, after a warm-up), then drives it at concurrency 1 and 8 with perf_analyzer
on a second server with the timing off. Where a lone request's time goes is read from three clocks of one machine:
the client's wall time; Triton's own statistics of the model over the same requests (the request's time in the
server, its queue, and compute input, infer and output); and the python step's phases, timed inside the stub
process by `ernie_deploy/serving/timing.py`. That timing is on only where the server's environment sets
`ERNIE_DEPLOY_STEP_TIMING` to a folder (each instance writes a CSV line an execute there); off, no step is wrapped.
Each part is its mean over the requests, so the parts add up to the client's mean. The same step is also called
in-process, one request at a time, under the same timers, and the in-process limit with tokenization (the tokenizer's
`encode_items`, then onnxruntime with its own defaults, as [the main run](#the-main-run) times it) is measured in
every round: the lone request's cost is the served p50 at concurrency 1 over that limit's batch-1 p50, and
concurrency 8 is read against its best batch.

Before and after, in one run: the classifier built and served by the source tree of the revision before this
section's cuts to the python step (`--before`; its python steps import that tree) and by this checkout, and this
checkout's build with one onnxruntime or instance option changed, in rounds that turn their order. Each cell keeps its
best round (the lowest p50, the highest throughput), the breakdown its least disturbed round (the lowest client
mean)."""

PARTS = {
    "grpc": "the client's wall less the request's time in Triton: tritonclient, loopback, Triton's gRPC frontend",
    "triton": "Triton's time around the model: neither queue nor compute",
    "queue": "the model's queue (dynamic batcher, no delay)",
    "compute": "the python model as Triton times it: compute input + infer + output",
    "ipc": "· compute less the step's execute: the python backend's round trip to its stub (shared memory)",
    "inputs": "· the request tensors read (get_input_tensor_by_name, as_numpy)",
    "check": "· the texts decoded and checked",
    "tokenize": "· the tokenizer step (encode, cut, pad)",
    "model": "· onnxruntime's run",
    "post": "· the postprocess (softmax, label)",
    "watch": "· what it answered, counted (serving.watch)",
    "step_other": "· the step's other lines (merging, the answers' dicts)",
    "response": "· the output tensors and the response built",
}
STEP = ("check", "tokenize", "model", "post", "watch", "step_other")

CUTS = """\
The cuts to the python step, each measured by the in-process step's phases above (before against after, same run):
the rows of each request in a merged batch summed in Python instead of numpy's cumsum (4.5 µs a call against 0.3
µs, two to four calls an execute); the classifier's postprocess reads a lone request's logits without concatenating
or copying them and takes the confidence where argmax found it; the fused step merges its tokenizer's, model's and
postprocess's tensors once a request instead of once an output."""


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def lone_request(results) -> list[str]:
    record = results("lone-request.json")
    command, _ = shown_command(record["command"])
    summary, limit, steps = record["summary"], record["in_process_limit"], record.get("in_process_step") or {}
    before, after = summary["before"]["lone"], summary["after"]["lone"]
    rows = []
    for part, what in PARTS.items():
        cells = []
        for lone in (before, after):
            parts = lone["parts_ms"]
            value = (
                parts["compute_input"] + parts["compute_infer"] + parts["compute_output"]
                if part == "compute"
                else parts.get(part)
            )
            cells.append(_ms(value))
        in_process = [_ms(steps[v]["phases_ms"].get(part)) if v in steps else "–" for v in ("before", "after")]
        if part == "compute":
            in_process = [_ms(steps[v]["mean_ms"]) if v in steps else "–" for v in ("before", "after")]
        rows.append([part, what, *cells, *in_process])
    rows.append(["total", "the client's mean (its p50)"] + [
        f"{lone['client_ms']:.3f} ({lone['client_p50_ms']:.3f})" for lone in (before, after)
    ] + ["", ""])  # fmt: skip
    variants = []
    for name, s in summary.items():
        variants.append(
            [
                name,
                f"{s['c1_p50_ms']:.2f}",
                signed(s["c1_added_ms"]),
                f"{s['c8_texts_per_s']:.0f}",
                ratio(s["c8_ratio"]),
                f"{s['c8_texts_per_execute']:.1f}" if s.get("c8_texts_per_execute") else "–",
                f"{s['c1_load_average'][0]:.2f} / {s['c8_load_average'][0]:.2f}",
            ]
        )
    during = [r["cells"][c]["load_average"] for r in record["rounds"] for c in ("1", "8")]
    return [
        "## A lone request's path",
        "",
        wrap(INTRO),
        "",
        *run_lines(_started(record), command=command, end=record.get("load_average_end"), during=during),
        f"- lone requests: {record['requests']:,} a round, {len(record['rounds']) // len(summary)} rounds; "
        f"the in-process limit with tokenization: batch 1 p50 {limit['b1_p50_ms']:.3f} ms, best batch "
        f"{limit['best_batch']} at {limit['best_texts_per_s']:.0f} texts/s",
        "",
        *table(
            ["part", "what it is", "before ms", "after ms", "in-process before ms", "in-process after ms"],
            rows,
            "llrrrr",
        ),
        "",
        *table(
            ["build", "c1 p50 ms", "over in-process b1", "c8 texts/s", "c8 × limit", "c8 texts/exec", "load c1 / c8"],
            variants,
            "lrrrrrr",
        ),
        "",
        wrap(_reading(record)),
        "",
        wrap(CUTS),
    ]


def _started(record: dict) -> dict:
    """The record with the load average its run started under (the machine's record was read as the file was
    written, at the run's end)."""
    machine = {**record["machine"], "loadavg_start": record["load_average_start"]}
    return {**record, "machine": machine}


def _reading(record: dict) -> str:
    summary, limit = record["summary"], record["in_process_limit"]
    s, lone = summary["after"], summary["after"]["lone"]
    parts = lone["parts_ms"]
    load = s["c1_load_average"][0]
    quiet = load < 1.0
    bound = 1.0 if quiet else 1.5
    met1 = "met" if s["c1_added_ms"] <= bound else "not met"
    met8 = "met" if s["c8_ratio"] >= 0.5 else "not met"
    fixed = parts["grpc"] + parts["triton"] + parts["queue"] + parts["ipc"] + parts["inputs"] + parts["response"]
    steps = record.get("in_process_step") or {}
    step = steps.get("after")
    model_gap = parts["model"] - step["phases_ms"]["model"] if step else None
    lines = [
        f"- **A lone request, after: {signed(s['c1_added_ms'])} over the in-process batch-1 p50 with tokenization "
        f"({limit['b1_p50_ms']:.3f} ms); target at most +{bound:.1f} ms on a "
        f"{'quiet' if quiet else 'slow'} host (1-minute load average {load:.2f} at the cell): {met1}.**",
        f"- **Concurrency 8, after: {ratio(s['c8_ratio'])} the in-process limit's best batch; target at least 0.5×: "
        f"{met8}.**",
        f"- What the server adds around the step and the project does not write: gRPC {parts['grpc']:.3f} ms, "
        f"Triton {parts['triton'] + parts['queue']:.3f} ms (queue included), the python backend's round trip "
        f"{parts['ipc']:.3f} ms, and Triton's tensors read and written in the stub "
        f"{parts['inputs'] + parts['response']:.3f} ms: {fixed:.3f} ms a request in all.",
    ]
    lines.append(
        f"- The breakdown's client is tritonclient's Python gRPC client: its p50 {lone['client_p50_ms']:.3f} ms "
        "against "
        f"perf_analyzer's (C++) {s['c1_p50_ms']:.3f} ms at concurrency 1 on the same build; the difference is mostly "
        "the Python client's own time, inside the gRPC part, and the targets are read from perf_analyzer's cells."
    )
    if model_gap is not None:
        lines.append(
            f"- onnxruntime's run took {parts['model']:.3f} ms in the server against {step['phases_ms']['model']:.3f} "
            f"ms in-process in the same step ({signed(model_gap, 3)}), and the in-process limit runs it with "
            "onnxruntime's defaults: its worker threads spin between runs, which the server's step turns off "
            "([Spinning](#spinning)); the `--ort-spinning run` row is what spinning inside a run only gives."
        )
    lines.append(_c8(record, fixed))
    lines.append(_before_after(record))
    lines.append(_options(record))
    return "\n".join(lines)


def _c8(record: dict, fixed: float) -> str:
    """What concurrency 8 costs a text beyond the in-process limit's best batch, beside a lone request's fixed parts
    and, where the run recorded them, the CPU the server and the load generator spent."""
    summary, limit = record["summary"], record["in_process_limit"]
    s = summary["after"]
    served, best = 1000 / s["c8_texts_per_s"], 1000 / limit["best_texts_per_s"]
    text = (
        f"- Concurrency 8 took {served:.2f} ms of the two cores' time a text against {best:.2f} ms in the in-process "
        f"limit's best batch (batch {limit['best_batch']}): {served - best:.2f} ms more, where a lone request's "
        f"fixed parts above cost {fixed:.2f} ms. Batching spreads them only in part: the batcher merged "
        f"{s['c8_texts_per_execute']:.1f} texts an execute, and each request still crosses gRPC and the stub's shared "
        "memory alone, on the same two cores as the load generator."
    )
    cell = next(
        r["cells"]["8"]
        for r in record["rounds"]
        if r["variant"] == "after" and r["cells"]["8"]["texts_per_s"] == s["c8_texts_per_s"]
    )
    server, client = cell.get("server_cpu_ms_per_text"), cell.get("client_cpu_ms_per_request")
    if server and client:
        text += (
            f" In that cell the server spent {server:.2f} ms of CPU a text and perf_analyzer {client:.2f} ms a "
            f"request: two cores give at most {2000 / (server + client):.0f} texts/s at that cost."
        )
    instanced = [(n, v) for n, v in summary.items() if "--instances 2" in n]
    if instanced:
        name, v = max(instanced, key=lambda item: item[1]["c8_ratio"])
        text += (
            f" Two instances (`{name.removeprefix('after, ')}`) overlap one request's round trip with another's run: "
            f"{ratio(v['c8_ratio'])} the limit at concurrency 8, {signed(v['c1_added_ms'])} for a lone request."
        )
    return text


def _before_after(record: dict) -> str:
    """The cuts' effect in this run: the in-process step's phases, then the served cells beside the spread of
    before's own rounds."""
    summary, steps = record["summary"], record.get("in_process_step") or {}
    own = {v: [r["cells"]["1"]["p50_ms"] for r in record["rounds"] if r["variant"] == v] for v in ("before", "after")}
    text = "- The cuts, before → after in this run:"
    if {"before", "after"} <= set(steps):
        b, a = steps["before"], steps["after"]
        moved = ", ".join(
            f"{p} {b['phases_ms'][p]:.3f} → {a['phases_ms'][p]:.3f}" for p in ("post", "step_other", "tokenize")
        )
        text += (
            f" the in-process step's mean {b['mean_ms']:.3f} → {a['mean_ms']:.3f} ms ({moved} ms; its model run "
            f"{b['phases_ms']['model']:.3f} → {a['phases_ms']['model']:.3f} ms, the same onnxruntime call, shows "
            "the host's noise), which is what the cuts are;"
        )
    text += (
        f" served, c1 p50 {summary['before']['c1_p50_ms']:.2f} → {summary['after']['c1_p50_ms']:.2f} ms and c8 "
        f"{summary['before']['c8_texts_per_s']:.0f} → {summary['after']['c8_texts_per_s']:.0f} texts/s, each "
        f"build's own c1 rounds spreading (before {min(own['before']):.2f} to {max(own['before']):.2f} ms, after "
        f"{min(own['after']):.2f} to {max(own['after']):.2f} ms)"
    )
    overlap = min(own["after"]) <= max(own["before"]) and min(own["before"]) <= max(own["after"])
    text += ": the served cells show the host's noise, not the cuts." if overlap else "."
    return text


def _options(record: dict) -> str:
    """The build options beside the default, against it."""
    summary = record["summary"]
    after = summary["after"]
    others = [(name, s) for name, s in summary.items() if name.startswith("after, ")]
    if not others:
        return ""
    parts = [
        f"`{name.removeprefix('after, ')}` c1 p50 {signed(s['c1_p50_ms'] - after['c1_p50_ms'])}, c8 "
        f"{ratio(s['c8_texts_per_s'] / after['c8_texts_per_s'])}"
        for name, s in others
    ]
    return "- Against the default build, same run: " + "; ".join(parts) + "."
