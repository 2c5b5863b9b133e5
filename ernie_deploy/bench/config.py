"""What a benchmark run measures: its settings (BenchConfig) and the defaults. Cheap to import: the CLI builds its
parser from these. The models' files and texts it runs on are ernie_deploy.evaluate.inputs.ModelInputs."""

from __future__ import annotations

from dataclasses import dataclass

from ernie_deploy.core.tls import ServerTls, Tls

SCHEMA = 1
BATCH_SIZES = (1, 8, 16, 32, 64)
CONCURRENCY = (1, 4, 8, 16)
CLIENT_BATCH = 8
MIN_CALLS = 3  # an in-process cell runs at least this many calls, however short its duration


@dataclass
class BenchConfig:
    batch_sizes: tuple[int, ...] = BATCH_SIZES
    concurrency: tuple[int, ...] = CONCURRENCY
    duration_s: float = 10.0  # per served cell
    inproc_duration_s: float = 5.0  # per in-process cell
    warmup_s: float = 1.0  # before each cell, not measured
    requests: int | None = None  # per served cell, instead of duration_s
    client_batch: int = CLIENT_BATCH  # texts per request of the batched served variant
    max_texts: int | None = None  # use only the first N test texts
    check_texts: int = 64  # texts whose served answers are compared with in-process ONNX
    # What drives the served rows, each in turn at every cell ("python", "perf_analyzer"); the first is the primary:
    # the report reads its rows, the others are shown beside them.
    load_generators: tuple[str, ...] = ("python",)
    perf_analyzer: str | None = None  # path to perf_analyzer, when it is one of them
    server_timeout_s: float = 180.0
    progress: bool = True
    # gRPC over TLS: the bench's servers serve with grpc_tls, its load generators connect with tls (both or neither).
    grpc_tls: ServerTls | None = None
    tls: Tls | None = None

    @classmethod
    def smoke(cls, **overrides) -> BenchConfig:
        """A tiny run that exercises every row (what CI runs): timings from it mean nothing."""
        values = dict(
            batch_sizes=(1, 8),
            concurrency=(1, 2),
            duration_s=1.0,
            inproc_duration_s=0.3,
            warmup_s=0.2,
            client_batch=4,
            max_texts=64,
            check_texts=16,
        )
        values.update(overrides)
        return cls(**values)
