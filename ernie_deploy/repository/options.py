"""How a repository is built: the options of `ernie-deploy build`, and the combinations refused before any
model is read."""

from __future__ import annotations

from dataclasses import dataclass

from ernie_deploy.core.errors import BadOptionsError
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.serving.limits import ReadingLimits
from ernie_deploy.serving.runtime import SPIN_MODES

RUNTIMES = ("onnxruntime", "python")
# The runtime and layout of a BuildOptions that names neither: settled when the build runs (pipeline.build): the ORT
# backend where the server has it, else the python model step; each model the fastest layout that fits it there.
AUTO = "auto"
DEVICES = ("cpu", "gpu")
# --ort-graph-level name -> the ORT backend's `optimization { graph { level } }` value. The backend maps -1 to
# ORT_ENABLE_BASIC, 1 to ORT_ENABLE_EXTENDED, 2 to ORT_DISABLE_ALL and anything else (0, or no block) to
# ORT_ENABLE_ALL, so "all" writes no block at all.
ORT_GRAPH_LEVELS = {"all": 0, "extended": 1, "basic": -1, "disabled": 2}
DEFAULT_MAX_BATCH_SIZE = 64
# --long-text: "auto" takes each kind's default (the first of its Kind.long_text_modes: window for token models, head
# otherwise).
LONG_TEXT = ("auto", "window", "head", "head_tail")


@dataclass(frozen=True)
class BuildOptions:
    """How models are built: BuildOptions() is what `ernie-deploy build` does with no flags, and a flag left out
    keeps its field's default."""

    # How the model step runs: "onnxruntime" (ORT backend) or "python"; "auto": settled when the build runs.
    runtime: str = AUTO
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
    # Let python steps take requests of different lengths in one batch (they pad them together).
    ragged: bool = True
    pad_to_multiple_of: int = 1  # tokenizer length buckets, for model steps that cannot take ragged batches
    # How the pipeline is split into Triton models: a key of ernie_deploy.repository.layouts.LAYOUTS (ensemble,
    # fused, graph-postprocess, tokenizer-in-model); each layout module says what it is and what it fits. "auto": each
    # model the fastest layout that fits it on its runtime (layouts.DEFAULT_LAYOUTS, measured); for a new version of a
    # served model, the layout it is served in.
    layout: str = AUTO
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
    # Texts longer than max_seq_len (LONG_TEXT): NER reads them in overlapping windows, a classifier keeps the head,
    # or the head and the tail (ernie_deploy.serving.windows).
    long_text: str = "auto"
    window_size: int | None = None  # tokens per window, [CLS] and [SEP] included; None: the model's max_seq_len
    window_stride: int | None = None  # tokens from one window's start to the next; None: half a window
    # How windows are cut (serving.windows.CUTS): whole sentences packed, or sliding; None: sentences
    window_cut: str | None = None
    head_tokens: int | None = None  # head_tail: tokens kept from the head; None: a quarter of the kept tokens
    # Token models: how logits become entities (serving.entities.DECODINGS), over what each model's export recorded;
    # None: the recorded one (constrained where none was). Refused for models of other kinds.
    ner_decoding: str | None = None
    # What one request may cost (serving.limits): the longest text and the most text per request, in characters;
    # past either the tokenizer refuses the request by name (INVALID_ARG) before tokenizing anything. None: the
    # measured default of the model's reading (the cut text, or windows over all of it).
    max_text_chars: int | None = None
    max_request_chars: int | None = None
    # Triton's response cache on the model users call (`response_cache { enable: true }` on its entry): a text asked
    # again is answered from the server's cache without running any step. The server needs a cache (`serve
    # --cache-size`, on by default); layouts/__init__.py says why the entry and how a rollout stays correct.
    response_cache: bool = False
    # The names and formats clients send and read (core.io.IOS): ernie-deploy's own, or PaddleNLP's Triton
    # pipeline's tensors (`INPUT`; `label` ids and `confidence`, or `OUTPUT`), so that its clients run unchanged.
    # None: what the model's record says (a new version: its model's), else ernie-deploy's own.
    io: str | None = None
    # What the model answers, counted by the step that answers and exported on the server's /metrics with the
    # reference profile beside it (serving.watch; docs/OPERATIONS.md). `--no-monitor` leaves it out.
    monitor: bool = True
    # The texts the reference profile is recorded on (repository.reference: one text per line, a pair model's
    # `text<TAB>text_pair`, or a .tsv / .jsonl split file); None: the model's dev split where the build finds it.
    reference: str | None = None

    @property
    def batching(self) -> bool:
        return not self.classic

    @property
    def limits(self) -> ReadingLimits:
        return ReadingLimits.given(self.max_text_chars, self.max_request_chars)


def check_options(options: BuildOptions) -> None:
    """Refuse option combinations that Triton would reject at load time, or silently ignore. The runtime must be
    settled: what depends on it is checked last, after what any runtime refuses."""
    if options.runtime not in (AUTO, *RUNTIMES):
        raise BadOptionsError(f"unknown runtime {options.runtime!r}", f"use one of {', '.join((AUTO, *RUNTIMES))}")
    if options.device not in DEVICES:
        raise BadOptionsError(f"unknown device {options.device!r}", f"use one of {', '.join(DEVICES)}")
    if options.ort_graph_level not in ORT_GRAPH_LEVELS:
        raise BadOptionsError(
            f"unknown ORT graph optimization level {options.ort_graph_level!r}",
            f"use one of {', '.join(ORT_GRAPH_LEVELS)}",
        )
    if options.max_queue_size < 0 or options.queue_timeout_us < 0:
        raise BadOptionsError("--max-queue-size and --queue-timeout-us cannot be negative", "pass 0 (no bound) or more")
    if options.classic and (options.max_queue_size or options.queue_timeout_us):
        raise BadOptionsError(
            "--max-queue-size and --queue-timeout-us bound the dynamic batcher's queue; --classic has no dynamic "
            "batcher",
            "drop --classic, or drop the queue options",
        )
    if options.ort_spinning not in SPIN_MODES:
        raise BadOptionsError(
            f"unknown --ort-spinning mode {options.ort_spinning!r}", f"use one of {', '.join(SPIN_MODES)}"
        )
    if options.ort_threads < 0 or options.ort_inter_op_threads < 0:
        raise BadOptionsError("onnxruntime thread counts cannot be negative", "pass 0 (onnxruntime's default) or more")
    if options.long_text not in LONG_TEXT:
        raise BadOptionsError(f"unknown --long-text {options.long_text!r}", f"use one of {', '.join(LONG_TEXT)}")
    if options.window_cut is not None:
        from ernie_deploy.serving.windows import check_cut

        check_cut(options.window_cut)
    windows = (
        ("--window-size", options.window_size),
        ("--window-stride", options.window_stride),
        ("--window-cut", options.window_cut),
    )
    for flag, value in windows:
        if value is not None and options.long_text not in ("auto", "window"):
            raise BadOptionsError(
                f"{flag} sets the windows of --long-text window; --long-text {options.long_text} has none",
                f"drop {flag}, or build with --long-text window (or auto)",
            )
    if options.window_stride is not None and options.window_stride < 1:
        raise BadOptionsError(
            f"--window-stride {options.window_stride}: windows that do not move never reach the text's end",
            "pass a stride of 1 token or more (at most max_seq_len - 2), or leave it out for half a window",
        )
    _check_limits(options)
    if options.reference is not None and not options.monitor:
        raise BadOptionsError(
            "--reference gives the texts of the reference profile a monitored model is compared with; --no-monitor "
            "builds the model unmonitored, with no reference",
            "drop --no-monitor, or drop --reference",
        )
    if options.ner_decoding is not None:
        from ernie_deploy.serving.entities import check_decoding

        check_decoding(options.ner_decoding)
    if options.io is not None:
        from ernie_deploy.core.io import check_io

        check_io(options.io)
    if options.head_tokens is not None and options.long_text != "head_tail":
        raise BadOptionsError(
            "--head-tokens sets how --long-text head_tail splits a text",
            "drop --head-tokens, or add --long-text head_tail",
        )
    _check_runtime(options)


def _check_runtime(options: BuildOptions) -> None:
    """What the model step's runtime refuses; "auto" has to be settled first (against the server, which this layer
    does not look at)."""
    if options.runtime == AUTO:
        raise BadOptionsError(
            "runtime 'auto' is settled against the server when the build runs, and this build was not settled",
            "build through ernie_deploy.pipeline.build.build_models (or settle the options with its "
            "resolve_build_options first), or name the runtime: runtime='python' or runtime='onnxruntime'",
        )
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
        raise BadOptionsError(
            f"{' and '.join(backend_only)} configure Triton's ONNX Runtime backend, but the model "
            f"step runs on the {options.runtime} backend",
            "build with --runtime onnxruntime, or drop the option",
        )
    if options.device == "gpu" and not ort_backend:
        # The python model step runs the CPU onnxruntime wheel (setup.cfg); a KIND_GPU python instance would
        # only reserve a GPU it never uses.
        raise BadOptionsError(
            f"--device gpu needs the ONNX Runtime backend; the {options.runtime} model step "
            "runs onnxruntime on the CPU",
            "build with --runtime onnxruntime --device gpu (the NGC tritonserver container has "
            "the backend), or with --device cpu",
        )
    if options.trt_fp16 and not (ort_backend and options.device == "gpu"):
        raise BadOptionsError(
            "--trt-fp16 is a GPU execution accelerator of the ONNX Runtime backend",
            "build with --runtime onnxruntime --device gpu --trt-fp16, or drop --trt-fp16",
        )


def _check_limits(options: BuildOptions) -> None:
    """A limit of at least one character, and requests that can carry a text of the longest length."""
    given = [v for v in (options.max_text_chars, options.max_request_chars) if v is not None]
    limits = options.limits
    if any(v < 1 for v in given) or any(r.max_request_chars < r.max_text_chars for r in (limits.cut, limits.windows)):
        raise BadOptionsError(
            f"--max-text-chars {options.max_text_chars} and --max-request-chars {options.max_request_chars}: a text "
            f"needs at least one character, and a request must be able to carry one text of the longest length (the "
            f"defaults: {limits.cut.max_text_chars:,} and {limits.cut.max_request_chars:,} for a cut text, "
            f"{limits.windows.max_text_chars:,} and {limits.windows.max_request_chars:,} for windows)",
            "pass --max-text-chars of 1 or more and --max-request-chars of at least as many",
        )


def check_task_options(model: ModelSpec, options: BuildOptions) -> None:
    """Refuse what does not fit this model (its kind), beyond what `check_options` refuses for any model (what does
    not fit its layout, the layout refuses: repository/layouts)."""
    long_text_mode(model, options)
    ner_decoding(model, options)
    model_io(model, options)


def model_io(model: ModelSpec, options: BuildOptions) -> str:
    """The wire `model` answers in (core.io): --io, else what its record says, else ernie-deploy's own; a refusal
    where its kind has no such wire."""
    from ernie_deploy.core.io import NATIVE, wire

    io = options.io or model.io or NATIVE
    wire(model.task_spec, io, model.name)
    return io


def ner_decoding(model: ModelSpec, options: BuildOptions) -> str | None:
    """How `model` turns logits into entities: --ner-decoding, else what its record says, else the default; None
    for a model of another kind, which has no entities (a --ner-decoding for it is refused)."""
    from ernie_deploy.serving.entities import DEFAULT_DECODING, check_decoding

    if not model.kind_facts.entities:
        if options.ner_decoding is not None:
            raise BadOptionsError(
                f"--ner-decoding sets how a token model decodes entities; {model.name!r} is a {model.kind} model",
                "build token models separately with it (--task token_cls or --model N), or record it per model "
                "with `ernie-deploy export --ner-decoding` (a deployment file's export: {ner_decoding: ...})",
            )
        return None
    return check_decoding(options.ner_decoding or model.ner_decoding or DEFAULT_DECODING)


def long_text_mode(model: ModelSpec, options: BuildOptions) -> str:
    """What `model` does with a text longer than max_seq_len under `options`, or a clear refusal."""
    from ernie_deploy.serving.windows import check_head_tokens, check_stride

    modes = model.kind_facts.long_text_modes
    mode = modes[0] if options.long_text == "auto" else options.long_text
    if mode not in modes:
        why = {
            "window": "a window decides each token, but a label per text needs the text in one model input",
            "head_tail": "cutting out a text's middle leaves no labels for the tokens there",
        }.get(mode, "")
        raise BadOptionsError(
            f"--long-text {mode} does not fit {model.kind} model {model.name!r}{': ' + why if why else ''}",
            f"build it with --long-text {' or '.join(('auto', *modes))} (build models of other kinds separately, "
            "with --task or --model)",
        )
    if mode == "head_tail" and len(model.task_spec.inputs) != 1:
        raise BadOptionsError(
            f"--long-text head_tail cuts one text; {model.name!r} takes {len(model.task_spec.inputs)}",
            "build it with --long-text head (pairs are cut the longer text first)",
        )
    if options.head_tokens is not None:
        check_head_tokens(options.head_tokens, model.max_seq_len)
    if options.long_text in ("auto", "window"):
        window = window_size(options, model.max_seq_len)
        if not 3 <= window <= model.max_seq_len:
            raise BadOptionsError(
                f"--window-size {window} does not fit model {model.name!r}: a window holds [CLS], [SEP] and at "
                f"least one token, and at most the model's max_seq_len ({model.max_seq_len}) tokens",
                f"pass --window-size from 3 to {model.max_seq_len}, or leave it out for {model.max_seq_len}",
            )
        check_stride(window_stride(options, model.max_seq_len), window)
    return mode


def window_size(options: BuildOptions, max_seq_len: int) -> int:
    """Tokens per window, [CLS] and [SEP] included: --window-size, else the model's max_seq_len."""
    return max_seq_len if options.window_size is None else options.window_size


def window_cut(options: BuildOptions) -> str:
    """How windows are cut: --window-cut, else whole sentences packed (serving.windows.DEFAULT_CUT)."""
    from ernie_deploy.serving.windows import DEFAULT_CUT

    return options.window_cut or DEFAULT_CUT


def window_stride(options: BuildOptions, max_seq_len: int) -> int:
    from ernie_deploy.serving.windows import default_stride

    window = window_size(options, max_seq_len)
    return default_stride(window) if options.window_stride is None else options.window_stride


def head_tokens(options: BuildOptions, max_seq_len: int) -> int | None:
    """Tokens a head_tail cut keeps from the head; None: the head alone (no head_tail)."""
    from ernie_deploy.serving.windows import default_head_tokens

    if options.long_text != "head_tail":
        return None
    return default_head_tokens(max_seq_len) if options.head_tokens is None else options.head_tokens
