"""`bash scripts/bench.sh gateway`: what the HTTP gateway (`ernie-deploy gateway`) costs over calling Triton's gRPC
directly, and what its SimpleServing route gives over SimpleServing itself, measured in one run on one machine.

The classifier is built once (the default build) and served by one tritonserver. In rounds, each variant is driven
the same way (the closed loop of bench.load: `concurrency` workers sending back to back, every request serialized
once up front, one text per request unless a row says otherwise):
- grpc: the asyncio gRPC load generator straight to Triton (what `ernie-deploy bench` measures);
- gateway simple: SimpleServing's body (`{"data": {"text": [...]}}`) to the gateway's `/models/<name>`;
- gateway hf: Hugging Face's body (`{"inputs": text}`) to the gateway's `/hf/<name>`;
- the same two routes of a second gateway beside the first that merges no requests (`--coalesce-ms 0`; the first
  runs with the default window, or `--coalesce-ms`): what merging concurrent requests into one Triton call gives.
The variants alternate within each round and each cell keeps its best round (the least disturbed by other work on a
shared host); the ratios are read from those. Then the gateway and Triton stop and PaddleNLP's SimpleServing serves
the same static model, loaded with the same SimpleServing bodies (benchmarks/peer).

The load generator runs in this process, an event loop on the machine's cores beside the server and the gateway:
the CPU seconds of each (the server's process group, the gateway's, this process) are in the rows. Every HTTP row
(the gateway's routes and SimpleServing) is sent by one generator: prebuilt request bytes on one keep-alive HTTP/1.1
connection per worker, as wrk sends them.

With `--pin`, this process and the server's threads share one core and the gateway has the other to itself: at
concurrency 8 on two shared cores the gateway's CPU is taken from the server's, and the pinned run says what the
gateway costs once it is not.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from benchmarks.http_load import _Connection, _request_bytes, run_http_load  # noqa: F401 (benchmarks.embed, gateway_profile)
from benchmarks.peer.server import PeerServer
from benchmarks.peer_rows import PeerRequest, prepare_peer_requests
from ernie_deploy.bench.load import LoadResult, prepare_requests, run_load
from ernie_deploy.bench.machine import run_record
from ernie_deploy.bench.rows import percentile
from ernie_deploy.core.errors import BadOptionsError, FailedRequestsError
from ernie_deploy.core.files import write_json
from ernie_deploy.evaluate.inputs import ModelInputs
from ernie_deploy.gateway.defaults import DEFAULT_COALESCE_MS
from ernie_deploy.gateway.process import GatewayProcess
from ernie_deploy.repository.options import BuildOptions
from ernie_deploy.server.process import TritonServer
from ernie_deploy.server.procs import group_cpu_seconds, group_members

NAME = "gw_news"
CONCURRENCY = (1, 8)
ROUNDS = 3
BATCH = 32  # the texts per request of the batched SimpleServing rows (what its clients send as a list)
# The targets the rows are read against: p50 at c1 over gRPC, throughput at c8 against gRPC (the gateway as it runs
# by default, merging concurrent requests: --coalesce-ms), and the SimpleServing route against SimpleServing itself.
TARGETS = {"c1_p50_added_ms": 1.0, "c8_throughput_ratio": 1.0, "simple_over_peer": 5.0}
# The variants of a second gateway beside the first, which merges no requests (--coalesce-ms 0).
UNMERGED = ", --coalesce-ms 0"


def _hf_requests(texts: list[str]) -> list[PeerRequest]:
    return [PeerRequest(json.dumps({"inputs": t}, ensure_ascii=False).encode("utf-8"), 1) for t in texts]


def simple_serving_answer(answer, request) -> str | None:
    labels = answer.get("result", {}).get("label") if isinstance(answer, dict) else None
    return None if isinstance(labels, list) and len(labels) == request.size else f"malformed answer: {answer!r:.160}"


def hugging_face_answer(answer, request) -> str | None:
    first = answer[0][0] if answer and isinstance(answer[0], list) else (answer[0] if answer else {})
    return None if "label" in first and "score" in first else f"malformed answer: {answer!r:.160}"


def _row(variant: str, batch: int, concurrency: int, got: LoadResult, gateway_cpu_s: float | None) -> dict:
    if got.errors:
        raise FailedRequestsError(f"{variant} c{concurrency}: requests failed: {got.error_messages}", "read the logs")
    latencies_ms = sorted(1000 * s for s in got.latencies_s)
    return {
        "variant": variant,
        "batch": batch,
        "concurrency": concurrency,
        "requests": len(latencies_ms),
        "texts_per_s": got.sequences / got.seconds,
        "p50_ms": percentile(latencies_ms, 50),
        "p99_ms": percentile(latencies_ms, 99),
        "server_cpu_s": got.server_cpu_s,
        "gateway_cpu_s": gateway_cpu_s,
        "client_cpu_s": got.client_cpu_s,
        "seconds": got.seconds,
        "load_average": [round(v, 2) for v in os.getloadavg()],
    }


def _best(rows: list[dict]) -> list[dict]:
    """Per (variant, batch, concurrency), the round with the highest throughput."""
    best: dict = {}
    for r in rows:
        key = (r["variant"], r["batch"], r["concurrency"])
        if key not in best or r["texts_per_s"] > best[key]["texts_per_s"]:
            best[key] = r
    return list(best.values())


def build_classifier(item: ModelInputs, workdir: Path, name: str):
    """The classifier's default build (python runtime) under `name` into `workdir`/models: (that repository, the
    model's served record)."""
    from ernie_deploy.repository.build import ModelArtifacts, build
    from ernie_deploy.repository.served import served_model

    repo = workdir / "models"
    entry = ModelArtifacts(replace(item.model, name=name), Path(item.onnx), item.static.vocab_file)
    build(entry, repo, BuildOptions(runtime="python"))
    return repo, served_model(repo, name)


@contextlib.contextmanager
def _pinned(pin: bool):
    """With `pin`: this process on its first core; (that core, the one left for the gateway) are yielded, or None
    without `pin`. Restored after."""
    before = os.sched_getaffinity(0)
    if pin:
        if len(before) < 2:
            raise BadOptionsError("--pin needs two cores", "run it without --pin")
        os.sched_setaffinity(0, {min(before)})
    try:
        yield (min(before), max(before)) if pin else None
    finally:
        os.sched_setaffinity(0, before)


def _pin_group(pgid: int, core: int) -> None:
    """Every thread of every process in group `pgid` onto `core`."""

    for pid in group_members(pgid):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                os.sched_setaffinity(int(task.name), {core})


def measure_gateway(
    item: ModelInputs,
    workdir: Path,
    *,
    rounds: int,
    duration_s: float,
    warmup_s: float,
    peer: bool = True,
    pin: bool = False,
    coalesce_ms: float = DEFAULT_COALESCE_MS,
) -> dict:

    repo, model = build_classifier(item, workdir, NAME)
    texts = item.texts
    grpc_requests = prepare_requests(item.task, texts, 1)
    simple = {1: prepare_peer_requests(model, texts, 1), BATCH: prepare_peer_requests(model, texts, BATCH)}
    hf = _hf_requests(texts)
    timing = {"warmup_s": warmup_s, "duration_s": duration_s}
    rows: list[dict] = []
    with (
        _pinned(pin) as cores,
        TritonServer(repo, http_port=0, grpc_port=0, metrics_port=0, log_file=workdir / "server.log") as server,
        GatewayProcess(
            repo, server.grpc_url, args=["--coalesce-ms", f"{coalesce_ms:g}"], log_file=workdir / "gateway.log"
        ) as gateway,
        GatewayProcess(repo, server.grpc_url, args=["--coalesce-ms", "0"], log_file=workdir / "unmerged.log") as alone,
    ):
        gateways = (gateway, alone)
        if cores is not None:
            # The server's threads too, once its models are loaded: onnxruntime sets each of its intra-op threads'
            # affinity itself, which a child's inherited one does not hold.
            _pin_group(server.pid, cores[0])
            for each in gateways:
                _pin_group(each.pid, cores[1])

        def http(url: str, requests: list, check):
            return lambda c: run_http_load(url, requests, c, check, server_pgid=server.pid, **timing)

        drivers = {
            "grpc": lambda c: run_load(server.grpc_url, model, grpc_requests, c, server_pgid=server.pid, **timing),
            "gateway simple": http(f"{gateway.url}/models/{NAME}", simple[1], simple_serving_answer),
            "gateway hf": http(f"{gateway.url}/hf/{NAME}", hf, hugging_face_answer),
            "gateway simple" + UNMERGED: http(f"{alone.url}/models/{NAME}", simple[1], simple_serving_answer),
            "gateway hf" + UNMERGED: http(f"{alone.url}/hf/{NAME}", hf, hugging_face_answer),
        }
        order = list(drivers.items())
        for round_ in range(rounds):
            # The order turns by one each round: the first cell after a switch of process ran slowest (a merging and
            # a non-merging gateway alternated at c1 gave the same p50 once neither always followed direct gRPC).
            turned = order[round_ % len(order) :] + order[: round_ % len(order)]
            for concurrency in CONCURRENCY:
                for variant, drive in turned:
                    before = [group_cpu_seconds(each.pid) for each in gateways]
                    got = drive(concurrency)
                    after = [group_cpu_seconds(each.pid) for each in gateways]
                    known = None not in before and None not in after
                    spent = sum(after) - sum(before) if known else None  # the idle gateway's share is ~0
                    rows.append({**_row(variant, 1, concurrency, got, spent), "round": round_})
                    _print(rows[-1])
            url = f"{gateway.url}/models/{NAME}"
            got = run_http_load(url, simple[BATCH], 8, simple_serving_answer, server_pgid=server.pid, **timing)
            rows.append({**_row("gateway simple", BATCH, 8, got, None), "round": round_})
            _print(rows[-1])
    if peer:
        rows += measure_peer(item, workdir, rounds=rounds, timing=timing)
    return {"rows": rows, "best": _best(rows)}


def measure_peer(item: ModelInputs, workdir: Path, *, rounds: int, timing: dict) -> list[dict]:
    """SimpleServing itself on the same static model, the same bodies."""

    rows = []
    server = PeerServer(item.static.root, item.model, log_file=workdir / "peer.log").start(timeout=300)
    try:
        for round_ in range(rounds):
            for batch, concurrency in [(1, c) for c in CONCURRENCY] + [(BATCH, 8)]:
                requests = prepare_peer_requests(item.model, item.texts, batch)
                got = run_http_load(
                    server.url, requests, concurrency, simple_serving_answer, server_pgid=server.pid, **timing
                )
                rows.append({**_row("simpleserving", batch, concurrency, got, None), "round": round_})
                _print(rows[-1])
    finally:
        server.stop()
    return rows


def _print(r: dict) -> None:
    print(
        f"round {r['round']} {r['variant']:<15} batch {r['batch']:>2} c{r['concurrency']}: "
        f"{r['texts_per_s']:8.1f} texts/s, p50 {r['p50_ms']:6.2f} ms, p99 {r['p99_ms']:6.2f} ms, "
        f"load average {r['load_average']}",
        flush=True,
    )


def ratios(best: list[dict]) -> dict:
    """The rows read against each other: each gateway route (`_hf`: Hugging Face's; `_unmerged`: the gateway that
    merges no requests) over direct gRPC, the merging gateway over the other, and the SimpleServing route over
    SimpleServing itself."""
    by = {(r["variant"], r["batch"], r["concurrency"]): r for r in best}
    out = {}
    for route, suffix in (("simple", ""), ("hf", "_hf")):
        for gateway, more in ((f"gateway {route}", ""), (f"gateway {route}{UNMERGED}", "_unmerged")):
            if (gateway, 1, 1) not in by:
                continue
            out[f"c1_p50_added_ms{suffix}{more}"] = by[(gateway, 1, 1)]["p50_ms"] - by[("grpc", 1, 1)]["p50_ms"]
            out[f"c8_throughput_ratio{suffix}{more}"] = (
                by[(gateway, 1, 8)]["texts_per_s"] / by[("grpc", 1, 8)]["texts_per_s"]
            )
        unmerged = (f"gateway {route}{UNMERGED}", 1, 8)
        if unmerged in by:
            out[f"c8_merged_over_unmerged{suffix}"] = (
                by[(f"gateway {route}", 1, 8)]["texts_per_s"] / by[unmerged]["texts_per_s"]
            )
            out[f"c1_p50_merged_minus_unmerged_ms{suffix}"] = (
                by[(f"gateway {route}", 1, 1)]["p50_ms"] - by[(f"gateway {route}{UNMERGED}", 1, 1)]["p50_ms"]
            )
    if ("simpleserving", 1, 8) in by:
        out["simple_over_peer"] = (
            by[("gateway simple", 1, 8)]["texts_per_s"] / by[("simpleserving", 1, 8)]["texts_per_s"]
        )
        out["simple_over_peer_c1"] = (
            by[("gateway simple", 1, 1)]["texts_per_s"] / by[("simpleserving", 1, 1)]["texts_per_s"]
        )
        out["simple_over_peer_batch"] = (
            by[("gateway simple", BATCH, 8)]["texts_per_s"] / by[("simpleserving", BATCH, 8)]["texts_per_s"]
        )
    return out


def render(best: list[dict], ratio: dict) -> str:
    lines = [
        "| variant | texts/request | concurrency | texts/s | p50 ms | p99 ms | server CPU s | gateway CPU s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in sorted(best, key=lambda r: (r["batch"], r["concurrency"], r["variant"])):
        cpu = "" if r["gateway_cpu_s"] is None else f"{r['gateway_cpu_s']:.1f}"
        server = "" if r["server_cpu_s"] is None else f"{r['server_cpu_s']:.1f}"
        lines.append(
            f"| {r['variant']} | {r['batch']} | {r['concurrency']} | {r['texts_per_s']:.1f} | {r['p50_ms']:.2f} | "
            f"{r['p99_ms']:.2f} | {server} | {cpu} |"
        )
    lines.append("")
    lines.append(
        f"gateway over gRPC: c1 p50 {ratio['c1_p50_added_ms']:+.2f} ms (SimpleServing route; Hugging Face route "
        f"{ratio['c1_p50_added_ms_hf']:+.2f} ms; target at most +{TARGETS['c1_p50_added_ms']} ms), c8 throughput "
        f"x{ratio['c8_throughput_ratio']:.2f} (Hugging Face route x{ratio['c8_throughput_ratio_hf']:.2f}; target at "
        f"least x{TARGETS['c8_throughput_ratio']})"
    )
    if "c8_merged_over_unmerged" in ratio:
        lines.append(
            f"merging (--coalesce-ms) over not: c8 throughput x{ratio['c8_merged_over_unmerged']:.2f} (Hugging Face "
            f"route x{ratio['c8_merged_over_unmerged_hf']:.2f}), c1 p50 "
            f"{ratio['c1_p50_merged_minus_unmerged_ms']:+.2f} ms "
            f"({ratio['c1_p50_merged_minus_unmerged_ms_hf']:+.2f} ms)"
        )
    if "simple_over_peer" in ratio:
        lines.append(
            f"SimpleServing route over SimpleServing itself: x{ratio['simple_over_peer']:.1f} at c8, "
            f"x{ratio['simple_over_peer_c1']:.1f} at c1, x{ratio['simple_over_peer_batch']:.1f} with {BATCH} texts "
            f"a request at c8 (target at least x{TARGETS['simple_over_peer']})"
        )
    return "\n".join(lines)


def run_gateway(
    inputs: list[ModelInputs],
    out: Path,
    *,
    rounds: int = ROUNDS,
    duration_s: float = 10.0,
    warmup_s: float = 1.0,
    peer: bool = True,
    pin: bool = False,
    coalesce_ms: float = DEFAULT_COALESCE_MS,
) -> dict:
    """`bash scripts/bench.sh gateway`: the classifier's rows, printed, and written to `out`/gateway.json (with
    `pin`: gateway-pinned.json)."""
    item = next((i for i in inputs if i.task.name == "seq_cls"), None)
    if item is None:
        raise BadOptionsError("the gateway bench measures the classifier", "run it with --task seq_cls")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ernie-deploy-gateway-") as work:
        measured = measure_gateway(
            item,
            Path(work),
            rounds=rounds,
            duration_s=duration_s,
            warmup_s=warmup_s,
            peer=peer,
            pin=pin,
            coalesce_ms=coalesce_ms,
        )
    ratio = ratios(measured["best"])
    record = {
        **run_record(measured["rows"]),
        "model": item.model.artifact_name,
        "best": measured["best"],
        "ratios": ratio,
        "targets": TARGETS,
        "pinned": pin,
        "coalesce_ms": coalesce_ms,
        "seconds": time.perf_counter() - t0,
    }
    write_json(record, out / ("gateway-pinned.json" if pin else "gateway.json"))
    print(render(measured["best"], ratio))
    return record
