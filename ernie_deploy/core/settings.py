"""ServingSettings: how a served model runs, never what it answers.

Two versions of one model may run with other settings (more instances, another batcher, other onnxruntime threads)
and answer the same; a model's record (core.spec) carries the settings it is served with (`ModelSpec.serving`), and
every config parameter and field that is a setting is rendered from them. `ernie-deploy tune` searches them and writes
its winner as a new version's settings.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from ernie_deploy.core.errors import BadRepositoryError

# A choice left to the build (pipeline.build, repository.resolve), wherever an option takes it: the runtime (the ORT
# backend where the server has it, else the python model step), the layout (repository.layouts.DEFAULT_LAYOUTS) and
# the long-text reading (the kind's first).
AUTO = "auto"
RUNTIMES = ("onnxruntime", "python")
DEVICES = ("cpu", "gpu")
# --ort-graph-level name -> the ORT backend's `optimization { graph { level } }` value. The backend maps -1 to
# ORT_ENABLE_BASIC, 1 to ORT_ENABLE_EXTENDED, 2 to ORT_DISABLE_ALL and anything else (0, or no block) to
# ORT_ENABLE_ALL, so "all" writes no block at all.
ORT_GRAPH_LEVELS = {"all": 0, "extended": 1, "basic": -1, "disabled": 2}
DEFAULT_MAX_BATCH_SIZE = 64


@dataclass(frozen=True)
class ServingSettings:
    """ServingSettings() is what `ernie-deploy build` runs a model with when no flag says otherwise."""

    # How the model step runs: "onnxruntime" (ORT backend) or "python"; "auto": settled when the build runs.
    runtime: str = AUTO
    # Where the model step's instances run: "cpu" (KIND_CPU) or "gpu" (KIND_GPU, ORT backend only: the python
    # model step runs the CPU onnxruntime wheel). Tokenizer and postprocess steps stay on the CPU either way.
    device: str = "cpu"
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE
    instances: int = 1
    max_queue_delay_us: int = 0  # no added latency for a lone request; batching still merges queued work
    # The dynamic batcher's queue policy on every batching step: past this many queued requests a step refuses new
    # ones at once with UNAVAILABLE (the client backs off and retries), so past capacity latency stays bounded
    # instead of growing with the queue. 0: no bound.
    max_queue_size: int = 0
    # ... and a request that waited this long in a step's queue is refused (UNAVAILABLE). 0: no timeout.
    queue_timeout_us: int = 0
    ort_threads: int = 0  # onnxruntime intra-op threads of the model step; 0: onnxruntime's default (all cores)
    # python model step: how onnxruntime's threads wait for work (serving.runtime.SPIN_MODES): "off" (they sleep),
    # "run" (busy inside a run, asleep between runs) or "always" (onnxruntime's default; measured slower in a server).
    ort_spinning: str = "off"
    # ORT backend only: onnxruntime's graph optimization level (a key of ORT_GRAPH_LEVELS). "all" is the
    # backend's default; lower levels load faster and help when a fusion misbehaves.
    ort_graph_level: str = "all"
    # ORT backend only: threads that run independent graph nodes at once. onnxruntime ignores the count in its
    # default sequential mode, so a count > 0 also selects the parallel execution mode.
    ort_inter_op_threads: int = 0
    # ORT backend on a GPU: hand the graph to TensorRT in FP16 (the backend's TensorRT execution accelerator,
    # CUDA for what TensorRT cannot run). Independent of `convert --fp16`, which changes the ONNX weights.
    trt_fp16: bool = False
    # Let python steps take requests of different lengths in one batch (they pad them together).
    ragged: bool = True
    pad_to_multiple_of: int = 1  # tokenizer length buckets, for model steps that cannot take ragged batches
    # The fixed-shape layout of the classic PaddleNLP Triton pipeline, kept as a baseline for benchmarks:
    # every text padded to max_seq_len, no dynamic batching, one instance per step.
    classic: bool = False
    # Triton's response cache on the model users call (`response_cache { enable: true }` on its entry): a text asked
    # again is answered from the server's cache without running any step. The server needs a cache (`serve
    # --cache-size`, on by default); repository/layouts/__init__.py says why the entry and how a rollout stays correct.
    response_cache: bool = False
    # Whether the step that answers counts what it answers, exported on the server's /metrics with the reference
    # profile beside it (serving.watch; docs/OPERATIONS.md). `build --no-monitor` turns it off.
    monitor: bool = True

    @property
    def batching(self) -> bool:
        return not self.classic

    @property
    def settings(self) -> ServingSettings:
        """These settings alone (a subclass, such as the build options, also carries other things)."""
        return ServingSettings(**{f.name: getattr(self, f.name) for f in fields(ServingSettings)})

    def to_dict(self) -> dict:
        return asdict(self.settings)

    @classmethod
    def from_dict(cls, data: dict, where: str) -> ServingSettings:
        known = {f.name for f in fields(ServingSettings)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise BadRepositoryError(
                f"{where}: unknown serving settings {', '.join(unknown)}",
                "write the record again with `ernie-deploy build` (or `tune`), which wrote it",
            )
        return ServingSettings(**data)

    # The three kinds of setting ----------------------------------------------------------------------------------
    @property
    def version_settings(self) -> VersionSettings:
        return _part(VersionSettings, self)

    @property
    def model_settings(self) -> ModelSettings:
        return _part(ModelSettings, self)

    @property
    def tokenizer_settings(self) -> TokenizerSettings:
        return _part(TokenizerSettings, self)


# Every field of ServingSettings is of exactly one of the three kinds below (tests/test_version_settings.py checks
# it). The record keeps them as one flat `serving` object (core.spec); these types say which of them a new version may
# change (repository.add_version refuses one that changes a model's or a tokenizer's setting, by its name).


@dataclass(frozen=True)
class VersionSettings:
    """How fast a version runs, never what it answers: its own Triton models' instances, batch size, batcher queue
    and onnxruntime threads. Versions of one model may differ in them (`ernie-deploy tune` writes its winner so); a
    tokenizer step shared with other models keeps its own, and the entry takes no larger batches than it does."""

    max_batch_size: int
    instances: int
    max_queue_delay_us: int
    max_queue_size: int
    queue_timeout_us: int
    ort_threads: int
    ort_spinning: str
    ort_inter_op_threads: int


@dataclass(frozen=True)
class ModelSettings:
    """What every version of a model shares: where and how its model step runs (the backend, the device, the graph
    optimization and TensorRT FP16 may each move an answer's last digits), the fixed-shape baseline, the response
    cache (keyed by the entry's name and version) and the watch of its answers (which changes the answering step's
    inputs)."""

    runtime: str
    device: str
    ort_graph_level: str
    trt_fp16: bool
    classic: bool
    response_cache: bool
    monitor: bool


@dataclass(frozen=True)
class TokenizerSettings:
    """What the models that share one tokenizer step agree on: how its ids reach the steps after it (ragged batches,
    or padded to a multiple of a length)."""

    ragged: bool
    pad_to_multiple_of: int


def _part(kind: type, settings: ServingSettings):
    return kind(**{f.name: getattr(settings, f.name) for f in fields(kind)})


def changed_settings(before, after) -> dict[str, tuple]:
    """Field -> (before, after) of two settings of one kind (VersionSettings, ModelSettings or TokenizerSettings)
    where they differ."""
    return {
        f.name: (getattr(before, f.name), getattr(after, f.name))
        for f in fields(before)
        if getattr(before, f.name) != getattr(after, f.name)
    }
