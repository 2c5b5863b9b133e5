"""How a repository is built: the options of `ernie-deploy build`, and the combinations refused before any
model is read."""

from __future__ import annotations

from dataclasses import dataclass

from ernie_deploy.core.errors import ErnieDeployError

RUNTIMES = ("onnxruntime", "python")
DEVICES = ("cpu", "gpu")
# --ort-graph-level name -> the ORT backend's `optimization { graph { level } }` value. The backend maps -1 to
# ORT_ENABLE_BASIC, 1 to ORT_ENABLE_EXTENDED, 2 to ORT_DISABLE_ALL and anything else (0, or no block) to
# ORT_ENABLE_ALL, so "all" writes no block at all.
ORT_GRAPH_LEVELS = {"all": 0, "extended": 1, "basic": -1, "disabled": 2}
DEFAULT_MAX_BATCH_SIZE = 64


@dataclass(frozen=True)
class BuildOptions:
    runtime: str = "python"  # how the model step runs: "onnxruntime" (ORT backend) or "python"
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
    ort_spinning: bool = False  # python model step: let onnxruntime's idle threads busy-wait (measured slower)
    # Let python steps take requests of different lengths in one batch (they pad them together).
    ragged: bool = True
    pad_to_multiple_of: int = 1  # tokenizer length buckets, for model steps that cannot take ragged batches
    # One python model per task under the ensemble's name (tokenizer, onnxruntime and postprocess in one
    # process) instead of the four-model ensemble: same tensors for clients, fewer hops; python runtime only.
    fused: bool = False
    # The fixed-shape layout of the classic PaddleNLP Triton pipeline, kept as a baseline for benchmarks:
    # every text padded to max_seq_len, no dynamic batching, one instance per step.
    classic: bool = False
    # ORT backend only: onnxruntime's graph optimization level (a key of ORT_GRAPH_LEVELS). "all" is the
    # backend's default; lower levels load faster and help when a fusion misbehaves.
    ort_graph_level: str = "all"
    # ORT backend only: threads that run independent graph nodes at once. onnxruntime ignores the count in its
    # default sequential mode, so a count > 0 also selects the parallel execution mode.
    ort_inter_op_threads: int = 0
    # Where the model step's instances run: "cpu" (KIND_CPU) or "gpu" (KIND_GPU, ORT backend only: the python
    # model step runs the CPU onnxruntime wheel). Tokenizer and postprocess steps stay on the CPU either way.
    device: str = "cpu"
    # ORT backend on a GPU: hand the graph to TensorRT in FP16 (the backend's TensorRT execution accelerator,
    # CUDA for what TensorRT cannot run). Independent of `convert --fp16`, which changes the ONNX weights.
    trt_fp16: bool = False

    @property
    def batching(self) -> bool:
        return not self.classic


def check_options(options: BuildOptions) -> None:
    """Refuse option combinations that Triton would reject at load time, or silently ignore."""
    if options.runtime not in RUNTIMES:
        raise ErnieDeployError(f"unknown runtime {options.runtime!r}", f"use one of {', '.join(RUNTIMES)}")
    if options.device not in DEVICES:
        raise ErnieDeployError(f"unknown device {options.device!r}", f"use one of {', '.join(DEVICES)}")
    if options.ort_graph_level not in ORT_GRAPH_LEVELS:
        raise ErnieDeployError(
            f"unknown ORT graph optimization level {options.ort_graph_level!r}",
            f"use one of {', '.join(ORT_GRAPH_LEVELS)}",
        )
    if options.max_queue_size < 0 or options.queue_timeout_us < 0:
        raise ErnieDeployError(
            "--max-queue-size and --queue-timeout-us cannot be negative", "pass 0 (no bound) or more"
        )
    if options.classic and (options.max_queue_size or options.queue_timeout_us):
        raise ErnieDeployError(
            "--max-queue-size and --queue-timeout-us bound the dynamic batcher's queue; --classic has no dynamic "
            "batcher",
            "drop --classic, or drop the queue options",
        )
    if options.ort_threads < 0 or options.ort_inter_op_threads < 0:
        raise ErnieDeployError("onnxruntime thread counts cannot be negative", "pass 0 (onnxruntime's default) or more")
    ort_backend = options.runtime == "onnxruntime"
    backend_only = [
        flag
        for flag, used in (
            ("--ort-graph-level", options.ort_graph_level != "all"),
            ("--ort-inter-op-threads", options.ort_inter_op_threads > 0),
        )
        if used
    ]
    if backend_only and not ort_backend:
        raise ErnieDeployError(
            f"{' and '.join(backend_only)} configure Triton's ONNX Runtime backend, but the model "
            f"step runs on the {options.runtime} backend",
            "build with --runtime onnxruntime, or drop the option",
        )
    if options.device == "gpu" and not ort_backend:
        # The python model step runs the CPU onnxruntime wheel (setup.cfg); a KIND_GPU python instance would
        # only reserve a GPU it never uses.
        raise ErnieDeployError(
            f"--device gpu needs the ONNX Runtime backend; the {options.runtime} model step "
            "runs onnxruntime on the CPU",
            "build with --runtime onnxruntime --device gpu (the NGC tritonserver container has "
            "the backend), or with --device cpu",
        )
    if options.trt_fp16 and not (ort_backend and options.device == "gpu"):
        raise ErnieDeployError(
            "--trt-fp16 is a GPU execution accelerator of the ONNX Runtime backend",
            "build with --runtime onnxruntime --device gpu --trt-fp16, or drop --trt-fp16",
        )
