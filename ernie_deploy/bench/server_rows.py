"""The rows of one served layout: tritonserver started on a repository, each task's answers checked against the
in-process predictions, then every served cell loaded by each load generator in turn; the server stopped after."""

from __future__ import annotations

import time
from pathlib import Path

from ernie_deploy.bench.config import BenchConfig
from ernie_deploy.bench.load import load_row, prepare_requests, run_load
from ernie_deploy.bench.machine import server_version
from ernie_deploy.bench.perf_analyzer import PERF_ANALYZER, perf_analyzer_input, run_perf_analyzer
from ernie_deploy.bench.rows import ROW_KINDS, Row, tick
from ernie_deploy.client.grpc_client import Client, decode_outputs
from ernie_deploy.core.errors import ServerNotReadyError
from ernie_deploy.evaluate.inputs import ModelInputs
from ernie_deploy.server.process import TritonServer


def _start_server(repository: Path, name: str, config: BenchConfig, workdir: Path):
    """tritonserver on `repository`, on free ports, started; its log in `workdir`."""

    server = TritonServer(
        repository,
        http_port=0,
        grpc_port=0,
        metrics_port=0,
        log_file=workdir / f"{name}_tritonserver.log",
        grpc_tls=config.grpc_tls,
    )
    server.start(timeout=config.server_timeout_s)
    return server


def _server_facts(repository: Path, server) -> dict:
    """What bench.json records of a started server; the tasks' facts are filled in as they are measured."""
    return {
        "repository": str(repository),
        "start_seconds": server.start_seconds,
        "log": str(server.log_path),
        "tritonserver": server_version(server.http_url),
        "binary": server.binary.kind,
        "tasks": {},
    }


def _check_served(server, item: ModelInputs, config: BenchConfig, references: dict) -> dict:
    """The served task's cold first request, and how many of the first check texts it answers as in-process."""

    task = item.task
    facts: dict = {}
    with Client(task, server.grpc_url, model=item.model, tls=config.tls) as client:
        client.check_ready()
        # The first request after ready: the cost a cold server puts on its first caller.
        t0 = time.perf_counter()
        client.infer(item.texts[:1])
        facts["cold_ms"] = 1000 * (time.perf_counter() - t0)
        check = item.texts[: config.check_texts]
        served = decode_outputs(task, client.infer_all(check, batch_size=8, progress=False))
        expected = references[item.model.artifact_name][: len(check)]
        agree = sum(a == b for a, b in zip(served, expected))
        facts["checked"] = len(check)
        facts["agree"] = agree
    return facts


def _layout_variants(name: str, config: BenchConfig) -> list[tuple[str, int]]:
    """(row kind, texts per request) of each served row the layout `name` gets."""
    return [
        (kind.key, config.client_batch if kind.batched else 1)
        for kind in ROW_KINDS.values()
        if kind.layout == name and (not kind.batched or config.client_batch > 1)
    ]


def perf_analyzer_row(
    server,
    item: ModelInputs,
    config: BenchConfig,
    requests: list,
    input_file: Path | None,
    kind: str,
    batch: int,
    concurrency: int,
    workdir: Path,
) -> Row:
    """One served cell measured by perf_analyzer, after the same warm-up the Python generator gives it."""
    # perf_analyzer measures from its first window: warm the server up the same way the Python generator does,
    # then hand it over.
    if config.warmup_s > 0:
        run_load(
            server.grpc_url, item.model, requests, concurrency, warmup_s=0, duration_s=config.warmup_s, tls=config.tls
        )
    return run_perf_analyzer(
        config.perf_analyzer,
        item.model,
        server.grpc_url,
        server.http_url,
        input_file,
        kind,
        batch,
        concurrency,
        config.duration_s,
        workdir,
        requests=config.requests,
        server_pgid=server.pid,
        tls=config.tls,
    )


def python_row(
    server, item: ModelInputs, config: BenchConfig, requests: list, kind: str, batch: int, concurrency: int
) -> Row:
    """One served cell measured by the built-in asyncio generator."""
    result = run_load(
        server.grpc_url,
        item.model,
        requests,
        concurrency,
        warmup_s=config.warmup_s,
        duration_s=config.duration_s,
        count=config.requests,
        server_pgid=server.pid,
        stats_url=server.http_url,
        tls=config.tls,
    )
    return load_row(item.model, kind, batch, concurrency, result)


def _served_rows(server, name: str, item: ModelInputs, config: BenchConfig, workdir: Path, progress) -> list[Row]:
    """Every served row of one task on the layout `name`: each variant at each concurrency, by each generator."""
    task = item.task
    input_file = None
    if PERF_ANALYZER in config.load_generators:
        input_file = perf_analyzer_input(task, item.texts, workdir / f"{item.model.artifact_name}_input.json")
    rows: list[Row] = []
    for kind, batch in _layout_variants(name, config):
        requests = prepare_requests(item.task, item.texts, batch)
        for concurrency in config.concurrency:
            # With two generators, each cell is measured by both in turn, so drift in the machine's
            # load touches both alike.
            for tool in config.load_generators:
                if tool == PERF_ANALYZER:
                    row = perf_analyzer_row(
                        server, item, config, requests, input_file, kind, batch, concurrency, workdir
                    )
                else:
                    row = python_row(server, item, config, requests, kind, batch, concurrency)
                rows.append(row)
                tick(progress, row)
    return rows


def bench_server(
    repository: Path,
    name: str,
    inputs: list[ModelInputs],
    config: BenchConfig,
    references: dict,
    workdir: Path,
    progress=None,
) -> tuple[dict, list[Row]]:
    """Start tritonserver on `repository`, measure its rows for every task, stop it. `name` is "served",
    "ensemble" or "classic". Returns (server facts, rows)."""
    server = _start_server(repository, name, config, workdir)
    info = _server_facts(repository, server)
    rows: list[Row] = []
    try:
        for item in inputs:
            info["tasks"][item.model.artifact_name] = _check_served(server, item, config, references)
            rows.extend(_served_rows(server, name, item, config, workdir, progress))
            if not server.is_running():
                raise ServerNotReadyError(
                    f"tritonserver ({name}) exited during the benchmark (log: {server.log_path})",
                    "read the end of that log for why it exited, then run the benchmark again",
                )
    finally:
        server.stop()
    return info, rows
