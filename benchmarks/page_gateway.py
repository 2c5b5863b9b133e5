"""The HTTP gateway's sections of docs/BENCHMARKS.md: against direct gRPC and SimpleServing (docs/gateway.json),
pinned (docs/gateway-pinned.json), on the tiny classifier (docs/gateway-tiny.json), a lone request's phases
(docs/gateway-profile.json) and refused bodies (docs/refused-bodies.json)."""

from __future__ import annotations

from benchmarks.gateway import BATCH, TARGETS, UNMERGED
from benchmarks.page_parts import ratio, run_lines, shown_command, signed, spread, table, wrap

GATEWAY = """\
The gateway benchmark builds a classifier (the default build: fused, python runtime) and serves it from one
tritonserver with `ernie-deploy gateway` in front. In rounds it drives each variant the same way (the closed loop of
`bench/load.py`, one text a request unless the row says more, 1 s warm-up and `--duration` measured a cell),
alternating within a round, and keeps each cell's best round: **grpc**, the asyncio gRPC load generator straight to
Triton; **gateway simple**, SimpleServing's body to the gateway's `POST /models/<name>`; **gateway hf**, Hugging
Face's body to `POST /hf/<name>`. These two go to a gateway that merges concurrent requests of a model into one
Triton call (`--coalesce-ms`, its default window unless the command names one), and the same two bodies, the rows
marked `--coalesce-ms 0`, to a second gateway beside it on the same server that merges none. Then the gateways and
Triton stop and PaddleNLP's SimpleServing serves the same static model and is sent the same SimpleServing bodies.
Every HTTP row is sent by one generator (prebuilt requests on one keep-alive HTTP/1.1 connection per worker, as wrk
sends them). The load generator shares the machine's cores with the server and the gateway; the CPU seconds of each
are in the table. The targets are `TARGETS` in benchmarks/gateway.py."""

GATEWAY_WHY = """\
What bounds concurrency 8 is the cores the gateway shares: the server's, the gateway's and the load generator's CPU
a request add up on two cores, so a model that costs the server less CPU a text leaves the gateway a larger share
([the tiny classifier](#the-test-suites-tiny-classifier) shows the bound). Merging concurrent requests into one
Triton call pays the costs of a call once for its parts: the gateway's gRPC client and HTTP/2 stream, and the
server's request handling. SimpleServing answers one request at a time (Paddle Inference in its own process, no
second hop), so it does about as much at concurrency 8 as at 1, while Triton batches. The gateway is for clients
that speak HTTP JSON and cannot change; a client that can speak gRPC saves the hop."""

PINNED = """\
`--pin` puts the load generator and the server's threads on one core and gives the gateway the other: what the
gateway costs at concurrency 8 once its CPU is not taken from the server's. A lone request's cost is read from the
unpinned run above: pinned, the c1 rows share a core with the load generator."""

TINY = """\
The test suite's tiny classifier (one layer, hidden size 32, random weights) costs the server little CPU a text, so
the gateway's share of each request shows. It is made, exported and converted as under
[Where a lone request's time goes](#where-a-lone-requests-time-goes)."""

PROFILE = """\
`python -m benchmarks.gateway_profile` times one request at a time through the gateway, phase by phase: perf
counters (`time.perf_counter_ns`, one clock for the client and the gateway's process) around each phase of the
gateway as it serves (uvicorn, uvloop, httptools, Starlette, tritonclient's asyncio client), the median of each
phase over the requests after a warm-up; then the same texts over direct gRPC from the same client. `--cprofile FILE`
also runs the gateway's event loop under cProfile for the CPU of each function. It serves the tiny classifier, so
that the model's own time is small and the gateway's share of each request shows:

```bash
{make_tiny}
ernie-deploy export --model news --checkpoint artifacts/checkpoints/news --out /tmp/news/static
ernie-deploy convert --model news --static /tmp/news/static --out /tmp/news/onnx/model.onnx
{command}
```

One run's wall times differ from the next by up to 2x on a shared host, so it is run several times and the least
disturbed run (the lowest sum of the gateway's own phases) is reported; the file keeps every run's figures
(`runs_*`)."""

PROFILE_WHY = """\
Per request the gateway makes no wire, requested outputs or Prometheus lookups (each made once per model record or
route), awaits a request that fits one Triton request without a task, and reads no config from disk
(`ModelTable.refreshed()`, a stat per config, serves `/info` only)."""

# The tiny classifier's checkpoint, made by the test suite's own helper.
MAKE_TINY = (
    ".venv/bin/python -c 'from pathlib import Path; from tests.conftest import make_tiny_checkpoint as m; "
    """m(Path("artifacts/checkpoints/news"))'"""
)

PHASES = {
    "http_in": "the client's write to the gateway's first read (loopback, wake-up)",
    "http_parse": "uvicorn reading the request (httptools), making its task",
    "loop_to_app": "the event loop's turn until the task runs",
    "routing": "Starlette's middleware and routing",
    "body": "reading the body",
    "json": "json.loads",
    "contract": "SimpleServing's checks (gateway.bodies)",
    "tensors": "the request tensors",
    "grpc": "the awaited gRPC call, answer included",
    "answers": "the answer tensors read back",
    "split": "Triton.infer around its one Triton request",
    "grpc_other": "Triton._infer's own lines (requested outputs, as_numpy)",
    "kind_json": "the kind's JSON and `asks`",
    "response_json": "encoding it (JSONResponse)",
    "metrics": "the Prometheus series",
    "handler_other": "the handler's other lines",
    "send": "Starlette's way back to uvicorn, the head written",
    "http_out": "the body written to the client's read",
}

REFUSED = """\
`python -m benchmarks.refused_bodies` measures what a body over `--max-body-bytes` costs the gateway
([GATEWAY.md](GATEWAY.md): it is read to its end and thrown away, up to {discard} MiB past the limit, before the
413). The gateway alone (the body is refused before Triton is asked) serves the bootstrap classifier with the default
limit of {limit} MiB; one client (`http.client`, a connection a request, loopback) sends each body {requests} times,
with a Content-Length and chunked."""


def _merges(record: dict) -> bool:
    """Whether the record's gateway rows were sent to a gateway that merges requests (its `coalesce_ms`); the rows of
    a file without it were sent to one that merges none, what `--coalesce-ms 0` runs."""
    return bool(record.get("coalesce_ms"))


def _rows_table(best: list[dict], merges: bool = True) -> list[str]:
    head = ["variant", "texts/request", "concurrency", "texts/s", "p50 ms", "p99 ms", "server CPU s", "gateway CPU s"]
    rows = [
        [
            r["variant"] + ("" if merges or not r["variant"].startswith("gateway") else UNMERGED),
            r["batch"],
            r["concurrency"],
            f"{r['texts_per_s']:.1f}",
            f"{r['p50_ms']:.2f}",
            f"{r['p99_ms']:.2f}",
            "" if r["server_cpu_s"] is None else f"{r['server_cpu_s']:.1f}",
            "" if r["gateway_cpu_s"] is None else f"{r['gateway_cpu_s']:.1f}",
        ]
        for r in sorted(best, key=lambda r: (r["batch"], r["concurrency"], r["variant"] != "grpc", r["variant"]))
    ]
    return table(head, rows, "lrrrrrrr")


def _paired(rows: list[dict], variant: str, concurrency: int, value) -> list[float]:
    """Per round, value(variant's cell, grpc's cell) of the same round: the comparison without the drift between
    rounds."""
    cells = {(r["variant"], r["round"]): r for r in rows if r["batch"] == 1 and r["concurrency"] == concurrency}
    return [value(cells[(variant, n)], cells[("grpc", n)]) for v, n in cells if v == variant and ("grpc", n) in cells]


def _met(ok: bool) -> str:
    return "met" if ok else "not met"


def _targets(record: dict) -> list[str]:
    q, rows = record["ratios"], record["rows"]
    added = [_paired(rows, v, 1, lambda a, b: a["p50_ms"] - b["p50_ms"]) for v in ("gateway simple", "gateway hf")]
    through = [
        _paired(rows, v, 8, lambda a, b: a["texts_per_s"] / b["texts_per_s"]) for v in ("gateway simple", "gateway hf")
    ]
    worst = max(q["c1_p50_added_ms"], q["c1_p50_added_ms_hf"])
    low = min(q["c8_throughput_ratio"], q["c8_throughput_ratio_hf"])
    how = "" if _merges(record) else f" (`{UNMERGED[2:]}`)"
    lines = [
        f"- **c1 p50 over direct gRPC{how}: {signed(q['c1_p50_added_ms'])} (SimpleServing route), "
        f"{signed(q['c1_p50_added_ms_hf'])} (Hugging Face route); target at most +{TARGETS['c1_p50_added_ms']:g} ms: "
        f"{_met(worst <= TARGETS['c1_p50_added_ms'])}.** Paired within each round: "
        f"{spread(added[0], lambda v: f'{v:+.2f}')} ms and {spread(added[1], lambda v: f'{v:+.2f}')} ms.",
        f"- **c8 throughput{how}: {ratio(q['c8_throughput_ratio'])} direct gRPC (SimpleServing route), "
        f"{ratio(q['c8_throughput_ratio_hf'])} (Hugging Face route); target at least "
        f"{TARGETS['c8_throughput_ratio']:g}×: {_met(low >= TARGETS['c8_throughput_ratio'])}**, on each cell's best "
        f"round; paired within each round {', '.join(ratio(v) for v in through[0])} (SimpleServing) and "
        f"{', '.join(ratio(v) for v in through[1])} (Hugging Face).",
    ]
    if "c8_merged_over_unmerged" in q:
        lines.append(
            f"- **Merging (`--coalesce-ms {record['coalesce_ms']:g}`) over merging none (`{UNMERGED[2:]}`), the "
            f"same routes on the same server: c8 throughput {ratio(q['c8_merged_over_unmerged'])} (SimpleServing "
            f"route), {ratio(q['c8_merged_over_unmerged_hf'])} (Hugging Face route); c1 p50 "
            f"{signed(q['c1_p50_merged_minus_unmerged_ms'])} and {signed(q['c1_p50_merged_minus_unmerged_ms_hf'])}.** "
            f"Merging none, the gateway answered {ratio(q['c8_throughput_ratio_unmerged'])} and "
            f"{ratio(q['c8_throughput_ratio_hf_unmerged'])} of direct gRPC at c8, and its c1 p50 was "
            f"{signed(q['c1_p50_added_ms_unmerged'])} and {signed(q['c1_p50_added_ms_hf_unmerged'])} over it."
        )
    if "simple_over_peer" in q:
        target = TARGETS["simple_over_peer"]
        lines.append(
            f"- **The SimpleServing route against SimpleServing itself: {ratio(q['simple_over_peer'], 1)} at c8 with "
            "one "
            f"text a request, {ratio(q['simple_over_peer_batch'], 1)} with {BATCH} texts a request at c8, "
            f"{ratio(q['simple_over_peer_c1'], 1)} at c1; target at least {target:g}×: "
            f"{_met(q['simple_over_peer_batch'] >= target)} with {BATCH} texts a request, "
            f"{_met(q['simple_over_peer'] >= target)} with one.**"
        )
    return lines


def _cpu_per_request(best: list[dict], variant: str, key: str) -> float:
    r = next(r for r in best if r["variant"] == variant and r["batch"] == 1 and r["concurrency"] == 8)
    return 1000 * r[key] / r["requests"]


def gateway(results) -> list[str]:
    record = results("gateway.json")
    best = record["best"]
    cpu = (
        f"- **CPU a request at c8:** the server {_cpu_per_request(best, 'gateway simple', 'server_cpu_s'):.2f} ms "
        f"through the gateway and {_cpu_per_request(best, 'grpc', 'server_cpu_s'):.2f} ms direct; the gateway "
        f"{_cpu_per_request(best, 'gateway simple', 'gateway_cpu_s'):.2f} ms, the HTTP load generator "
        f"{_cpu_per_request(best, 'gateway simple', 'client_cpu_s'):.2f} ms and the gRPC load generator "
        f"{_cpu_per_request(best, 'grpc', 'client_cpu_s'):.2f} ms."
    )
    during = [r["load_average"] for r in record["rows"]]
    return [
        "## HTTP gateway",
        "",
        GATEWAY,
        "",
        *run_lines(record, during=during, kept_as="gateway.json"),
        "",
        *_rows_table(best, _merges(record)),
        "",
        wrap("\n".join([*_targets(record), cpu])),
        "",
        GATEWAY_WHY,
    ]


def pinned(results) -> list[str]:
    record = results("gateway-pinned.json")
    q, best = record["ratios"], record["best"]
    how = f"merging (`--coalesce-ms {record['coalesce_ms']:g}`)" if _merges(record) else f"`{UNMERGED[2:]}`"
    read = (
        f"At c8 the gateway routes ({how}) answered {ratio(q['c8_throughput_ratio'])} (SimpleServing) and "
        f"{ratio(q['c8_throughput_ratio_hf'])} (Hugging Face) of direct gRPC, whose load generator shares the "
        f"server's core here ({_cpu_per_request(best, 'grpc', 'client_cpu_s'):.2f} ms of CPU a request against the "
        f"HTTP generator's {_cpu_per_request(best, 'gateway simple', 'client_cpu_s'):.2f} ms)."
    )
    if "c8_merged_over_unmerged" in q:
        read += (
            f" Merging over merging none: {ratio(q['c8_merged_over_unmerged'])} (SimpleServing) and "
            f"{ratio(q['c8_merged_over_unmerged_hf'])} (Hugging Face)."
        )
    during = [r["load_average"] for r in record["rows"]]
    return [
        "### Pinned",
        "",
        PINNED,
        "",
        *run_lines(record, during=during, kept_as="gateway-pinned.json"),
        "",
        *_rows_table(best, _merges(record)),
        "",
        wrap(read),
    ]


def _c8_bound(record: dict) -> str:
    """What bounds c8, from a record's c8 rows: throughput is at most the cores over the server's, the gateway's and
    the load generator's CPU a request."""
    best, cores, target = record["best"], record["machine"]["cores"], TARGETS["c8_throughput_ratio"]
    keys = {"server": "server_cpu_s", "gateway": "gateway_cpu_s", "load generator": "client_cpu_s"}
    through = {name: _cpu_per_request(best, "gateway simple", key) for name, key in keys.items()}
    direct = {name: _cpu_per_request(best, "grpc", key) for name, key in keys.items()}
    speed = {v: next(r["texts_per_s"] for r in best if (r["variant"], r["batch"], r["concurrency"]) == (v, 1, 8))
             for v in ("gateway simple", "grpc")}  # fmt: skip
    busy = {v: speed[v] * sum(ms.values()) / 1000 for v, ms in (("gateway simple", through), ("grpc", direct))}
    text = (
        f"- **What bounds c8** (from these rows: throughput is at most the cores over the server's, the gateway's and "
        f"the load generator's CPU a request): through the gateway the {cores} cores were "
        f"{busy['gateway simple']:.2f} busy ("
        + ", ".join(f"{name} {ms:.2f}" for name, ms in through.items())
        + f" ms a request), direct {busy['grpc']:.2f}."
    )
    if speed["gateway simple"] < target * speed["grpc"]:
        needed = 1000 * cores / (target * speed["grpc"]) - through["server"] - through["load generator"]
        text += (
            f" {target:g}× would need the gateway at {needed:.2f} ms of CPU a request, of which "
            f"{direct['load generator']:.2f} ms is what the asyncio gRPC client spends on the same call."
        )
    return text


def tiny(results) -> list[str]:
    record = results("gateway-tiny.json")
    during = [r["load_average"] for r in record["rows"]]
    return [
        "### The test suite's tiny classifier",
        "",
        TINY,
        "",
        *run_lines(record, during=during, kept_as="gateway-tiny.json"),
        "",
        *_rows_table(record["best"], _merges(record)),
        "",
        wrap("\n".join([*_targets(record), _c8_bound(record)])),
    ]


def profile(results) -> list[str]:
    record = results("gateway-profile.json")
    run, hf = record["after"], record["hugging_face_route"]["after"]
    command, _ = shown_command(run["command"])
    phases = run["phases_p50_ms"]
    rows = [[p, PHASES.get(p, ""), f"{ms:.3f}"] for p, ms in phases.items()]
    runs = record["runs_own_p50_ms"]["after"]
    read = (
        f"Through the gateway {run['gateway_p50_ms']:.2f} ms, direct gRPC {run['direct_grpc_p50_ms']:.2f} ms "
        f"({signed(run['added_p50_ms'])}); the gateway's own phases (all but grpc, http_in and http_out) "
        f"{run['own_p50_ms']:.2f} ms; gateway CPU {run['gateway_cpu_ms_per_request']:.2f} ms a request; the least "
        f"disturbed of {len(runs)} runs. The gRPC call from inside the gateway ({phases['grpc']:.2f} ms) costs about "
        f"what the same call costs the load generator ({run['direct_grpc_p50_ms']:.2f} ms): the gateway adds the HTTP "
        "hop and its own phases, not a slower call. The score parameters' checks and the kind's JSON (`kind_json`) "
        f"take {phases['kind_json']:.3f} ms on the SimpleServing route and {hf['phases_p50_ms']['kind_json']:.3f} ms "
        f"on the Hugging Face route (`hugging_face_route`, a run with `--route hf`)."
    )
    return [
        "### Where a lone request's time goes",
        "",
        PROFILE.format(command=command, make_tiny=MAKE_TINY),
        "",
        *run_lines(run, command=command),
        f"- requests: {run['requests']:,} ({run['route']} route)",
        "",
        *table(["phase", "what it is", "p50 ms"], rows, "llr"),
        "",
        wrap(read),
        "",
        PROFILE_WHY,
    ]


def refused_bodies(results) -> list[str]:
    record = results("refused-bodies.json")
    before, rows = record["rows"][0]["memory_kib_before"], record["rows"][1:]
    mib = 1024 * 1024
    cells = [
        [
            f"{r['bytes']:,} bytes" + (" (the bound)" if r["body"] == "at the bound" else ""),
            r["sent"],
            f"{r['gateway_cpu_ms']:.1f}",
            f"{r['wall_ms_p50']:.1f}",
            f"{r['memory_kib']['VmRSS'] / 1024:.1f}",
            f"{r['memory_kib']['VmHWM'] / 1024:.1f}",
        ]
        for r in rows
    ]
    head = ["body", "sent", "gateway CPU ms a request", "wall ms a request (p50)", "gateway RSS after, MiB"]
    text = wrap(
        REFUSED.format(
            discard=record["discard_bytes"] // mib, limit=record["limit_bytes"] // mib, requests=rows[0]["requests"]
        )
    )
    return [
        "### Refused bodies",
        "",
        text,
        "",
        *run_lines(record, kept_as="refused-bodies.json"),
        "",
        *table([*head, "its peak, MiB"], cells, "llrrrr"),
        "",
        wrap(
            f"The gateway held {before['VmRSS'] / 1024:.1f} MiB before the first body and "
            f"{spread([r['memory_kib']['VmRSS'] / 1024 for r in rows], lambda v: f'{v:.1f}')} MiB after each: "
            "nothing thrown away is kept. A chunked body is held up to the limit before it passes it."
        ),
    ]
