"""What a benchmark run measures and on what: its settings (BenchConfig), each task's files and texts
(TaskInputs), and the defaults. Cheap to import: the CLI builds its parser from these."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.paths import artifact_dir
from ernie_deploy.core.tasks import TaskSpec
from ernie_deploy.core.tls import ServerTls, Tls

if TYPE_CHECKING:
    from ernie_deploy.export.static import StaticModel

SCHEMA = 1
BATCH_SIZES = (1, 8, 16, 32, 64)
CONCURRENCY = (1, 4, 8, 16)
CLIENT_BATCH = 8
REFERENCE_CONCURRENCY = 8  # the ratios compare served and classic at this concurrency
MIN_CALLS = 3  # an in-process cell runs at least this many calls, however short its duration
# The ERNIE 3.0 shapes remade from the classifier for the size rows (fetch.shapes.SHAPES; micro sits between nano
# and mini and adds little); the smoke run times a 2-layer shape instead.
SIZES = ("nano", "mini", "medium", "base")


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
    paddle: bool = True
    int8: bool = True  # quantize the model (as `convert --quantize int8` does) and add its in-process rows
    ensemble: bool = True  # the ensemble layout's rows beside the default build's
    classic: bool = True
    peer: bool = True  # PaddleNLP SimpleServing on the same model (bench/peer_rows.py), where paddlenlp is installed
    check_texts: int = 64  # texts whose served answers are compared with in-process ONNX
    # What drives the served rows, each in turn at every cell ("python", "perf_analyzer"); the first is the primary:
    # the ratios, the plot and the main tables use its rows, the others are shown beside it.
    load_generators: tuple[str, ...] = ("python",)
    perf_analyzer: str | None = None  # path to perf_analyzer, when it is one of them
    sizes: tuple[str, ...] = SIZES  # the classifier remade in these shapes, benched beside it (bench.sizes)
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
            sizes=("tiny",),
        )
        values.update(overrides)
        return cls(**values)


@dataclass
class TaskInputs:
    """One task's files and texts: what the in-process rows run, and what the repositories are built from."""

    task: TaskSpec
    onnx: Path
    static: StaticModel  # vocab, labels, and the Paddle model
    texts: list[str]
    # A model remade in a real shape for the size rows (bench.sizes): its size, parameters, layers and hidden size.
    # Such a model gets the rows that say what a size costs (in-process limits, served, ensemble), not the others.
    shape: dict | None = None

    @classmethod
    def load(
        cls,
        task: TaskSpec,
        *,
        static: str | Path | None = None,
        onnx: str | Path | None = None,
        data: str | Path | None = None,
        max_texts: int | None = None,
    ) -> TaskInputs:
        """The model's artifacts (artifacts/static/<name>, artifacts/onnx/<name>/model.onnx; see
        TaskSpec.artifact_name) and the non-blank texts of its task's test split, unless given; the first
        `max_texts` texts only, if set."""
        from ernie_deploy.export.static import StaticModel

        model = StaticModel.load(static or artifact_dir("static", task.artifact_name))
        onnx_path = Path(onnx or artifact_dir("onnx", task.artifact_name) / "model.onnx")
        if not onnx_path.exists():
            which = f"--name {task.ensemble}" if task.artifact_name == task.ensemble else f"--task {task.name}"
            raise ErnieDeployError(f"no ONNX model at {onnx_path}", f"run `ernie-deploy convert {which}`")
        return cls(task, onnx_path, model, cls.texts_of(task, max_texts, data))

    @staticmethod
    def texts_of(task: TaskSpec, max_texts: int | None = None, data: str | Path | None = None) -> list:
        """The non-blank texts (or pairs, both texts non-blank) of a split file (default: the task's test split),
        the first `max_texts` if set."""
        from ernie_deploy.fetch.data import data_dir, read_split_file, split_file

        data = Path(data or split_file(data_dir(task.dataset), "test", task.split_format))
        if not data.exists():
            raise ErnieDeployError(f"no test texts at {data}", "run `ernie-deploy fetch-data`")
        texts = [
            t for t in read_split_file(data)[0] if all(part.strip() for part in (t if isinstance(t, tuple) else (t,)))
        ]
        return texts[:max_texts] if max_texts else texts
