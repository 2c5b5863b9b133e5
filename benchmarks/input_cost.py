"""What one text costs a served model, by its length: the answer's time and the server's memory, measured from outside
the server, up to each model's limit and past it (`bash scripts/bench.sh input-cost`).

The server runs with its request limits raised past the longest text measured, so the cost of every length is seen;
then the default limits are checked: the text at the limit is answered, one character more is refused by name, and
a small request after each is answered. Memory is the resident set of the server's whole process group (tritonserver
and every python-backend stub, shared pages counted in each: an upper bound), sampled every 10 ms while a request
runs; its growth over the level before the request is what the request cost.

The texts are real: the task's test texts joined until the length is reached (NER sentences, news titles), so the
tokens per character, the entities per text and the windows are what a user's long text gives.
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from pathlib import Path

from ernie_deploy.bench.config import BenchConfig
from ernie_deploy.bench.load import named_outputs
from ernie_deploy.bench.machine import run_record
from ernie_deploy.bench.run import build_layout
from ernie_deploy.client.grpc_client import grpc_client
from ernie_deploy.core.files import write_json
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.evaluate.inputs import ModelInputs
from ernie_deploy.server.process import TritonServer
from ernie_deploy.server.procs import group_rss_bytes
from ernie_deploy.serving.limits import ReadingLimits, TextLimits

LENGTHS = (1_000, 5_000, 10_000, 20_000, 40_000)
SMOKE_LENGTHS = (100, 1_000)
# The budget the default limits are chosen against (serving.limits): one text answered within this on 2 cores, the
# server growing by at most this much while it runs.
BUDGET_S = 1.0
BUDGET_MB = 300


def joined_text(texts: list[str], length: int) -> str:
    """`length` characters of the texts joined in order (repeated if they run out)."""
    if not texts:
        raise ValueError("no texts to join")
    out, total = [], 0
    while total < length:
        for text in texts:
            out.append(text)
            total += len(text)
            if total >= length:
                break
    return "".join(out)[:length]


class RssSampler:
    """The peak resident memory of a process group while it runs (a thread sampling /proc every `every` s)."""

    def __init__(self, pgid: int, every: float = 0.01):
        self.pgid, self.every = pgid, every
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:

        while not self._stop.is_set():
            self.peak = max(self.peak, group_rss_bytes(self.pgid))
            self._stop.wait(self.every)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def timed_request(client, model: ModelSpec, text: str, pgid: int, timeout: float = 120.0) -> dict:
    """One request of one text to `model`: {"seconds", "peak_mb" (growth over the level before it; a stub keeps
    memory it freed for later requests, so a request after a larger one can grow it less), "server_mb" (the server's
    peak while it ran), "error" (None, or the server's message)}."""
    import numpy as np
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    tensor = grpcclient.InferInput("text", [1, 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[text.encode("utf-8")]], dtype=np.object_))
    outputs = named_outputs(model)
    before = group_rss_bytes(pgid)
    error = None
    with RssSampler(pgid) as sampler:
        t0 = time.perf_counter()
        try:
            client.infer(model.name, [tensor], outputs=outputs, client_timeout=timeout)
        except InferenceServerException as exc:
            error = exc.message()
        seconds = time.perf_counter() - t0
    growth = max(0, sampler.peak - before) / 2**20
    return {"seconds": seconds, "peak_mb": growth, "server_mb": sampler.peak / 2**20, "error": error}


def measure(
    url: str, pgid: int, inputs: list[ModelInputs], lengths: tuple[int, ...], repeats: int, tls=None
) -> list[dict]:
    """A row per model and length: median seconds of `repeats` requests, the largest memory growth, errors."""

    rows = []
    client = grpc_client(url, tls)
    try:
        for item in inputs:
            timed_request(client, item.model, item.texts[0], pgid)  # warm: the first request loads what is lazy
            for length in lengths:
                text = joined_text(item.texts, length)
                runs = [timed_request(client, item.model, text, pgid) for _ in range(repeats)]
                rows.append(
                    {
                        "model": item.name,
                        "chars": length,
                        "seconds": statistics.median(r["seconds"] for r in runs),
                        "peak_mb": max(r["peak_mb"] for r in runs),
                        "server_mb": max(r["server_mb"] for r in runs),
                        "ms_per_1000_chars": 1000 * statistics.median(r["seconds"] for r in runs) / length * 1000,
                        "error": next((r["error"] for r in runs if r["error"]), None),
                    }
                )
                print(_line(rows[-1]), flush=True)
    finally:
        client.close()
    return rows


def check_limits(url: str, pgid: int, inputs: list[ModelInputs], limits: dict[str, TextLimits], tls=None) -> list[dict]:
    """At each model's limit (`limits`, by model name), one past it, and a small text after each: what a server with
    these limits answers."""

    rows = []
    client = grpc_client(url, tls)
    try:
        for item in inputs:
            own = limits[item.name]
            for length in (own.max_text_chars, own.max_text_chars + 1):
                run = timed_request(client, item.model, joined_text(item.texts, length), pgid)
                after = timed_request(client, item.model, item.texts[0], pgid)
                rows.append({"model": item.name, "chars": length, **run, "small_after": after["error"]})
                print(_line(rows[-1]), flush=True)
    finally:
        client.close()
    return rows


def _line(row: dict) -> str:
    answer = f"refused: {row['error'][:90]}" if row["error"] else "answered"
    cost = f"{row['seconds'] * 1000:9.1f} ms  +{row['peak_mb']:7.1f} MB (server {row['server_mb']:7.1f} MB)"
    return f"{row['model']:>16} {row['chars']:>8,} chars  {cost}  {answer}"


def run_input_cost(inputs: list[ModelInputs], config: BenchConfig, out: Path, smoke: bool = False) -> dict:
    """Every length on a server whose limits let it through, then the default limits on one that has them; writes
    `out`/input_cost.json."""
    from ernie_deploy.repository.served import served_limits

    lengths = SMOKE_LENGTHS if smoke else LENGTHS
    raised = max(lengths) * 2
    with tempfile.TemporaryDirectory(prefix="ernie-deploy-input-cost.") as work:
        work = Path(work)
        runs = {}
        for key, options in (("raised", {"max_text_chars": raised, "max_request_chars": raised}), ("defaults", {})):
            # the ensemble layout, as the figures in docs/input_cost.json were measured
            repo = build_layout(inputs, work / key, layout="ensemble", **options)
            log = work / f"{key}.log"
            with TritonServer(
                repo, http_port=0, grpc_port=0, metrics_port=0, log_file=log, grpc_tls=config.grpc_tls
            ) as server:
                if options:
                    runs[key] = measure(server.grpc_url, server.pid, inputs, lengths, 1 if smoke else 3, config.tls)
                else:
                    limits = {name: own for name, (_, own) in served_limits(repo).items()}
                    runs[key] = check_limits(server.grpc_url, server.pid, inputs, limits, config.tls)
    record = {
        **run_record(runs["raised"]),
        "budget": {"seconds": BUDGET_S, "mb": BUDGET_MB},
        "limits": ReadingLimits().parameters(),
        "limit_checks": runs["defaults"],
    }
    out.mkdir(parents=True, exist_ok=True)
    write_json(record, out / "input_cost.json")
    print(f"wrote {out / 'input_cost.json'}")
    return record
