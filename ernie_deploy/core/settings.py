"""ServingSettings: how a served model runs, never what it answers.

Two versions of one model may run with other settings (more instances, another batcher, other onnxruntime threads)
and answer the same; a model's record (core.spec) carries the settings it is served with (`ModelSpec.serving`), and
every config parameter and field that is a setting is rendered from them. `ernie-deploy tune` searches them and writes
its winner as a new version's settings.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from ernie_deploy.core.errors import BadRepositoryError

# The runtime of settings that name none: settled when the build runs (pipeline.build): the ORT backend where the
# server has it, else the python model step.
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
