"""How a repository is built: the options of `ernie-deploy build`, and the combinations refused before any
model is read.

The options are three things (`BuildOptions` joins them for the command line): the serving settings
(core.settings.ServingSettings: how the model runs), the record overrides (`RecordOverrides`: facts of the record a
flag decides, None or "auto" keeping what the record says), and the build's inputs (the texts of the reference
profile). `repository.plan.plan` turns records and the options into the records as served.

Options are checked where they are made: a RecordOverrides or BuildOptions that exists is one whose combination is
accepted (a refused one raises BadOptionsError at construction, naming the flag), and every copy made of one
(`dataclasses.replace`) is checked again as it is made. Runtime "auto" is accepted until it is settled against the
server (repository.plan.settle); what depends on the runtime is checked on the settled options.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from ernie_deploy.core.errors import BadOptionsError
from ernie_deploy.core.io import check_io
from ernie_deploy.core.settings import (
    AUTO,
    DEVICES,
    ORT_GRAPH_LEVELS,
    RUNTIMES,
    ServingSettings,
)
from ernie_deploy.serving.entities import check_decoding
from ernie_deploy.serving.limits import ReadingLimits
from ernie_deploy.serving.parameter_types import Derived, Parameter
from ernie_deploy.serving.parameters import RECORDED
from ernie_deploy.serving.runtime import SPIN_MODES
from ernie_deploy.serving.windows import check_cut

# --long-text: "auto" keeps what the record says, else takes the kind's default (the first of its
# Kind.long_text_modes: window for token models, head otherwise).
LONG_TEXT = ("auto", "window", "head", "head_tail")


@dataclass(frozen=True)
class RecordOverrides:
    """Facts of a model's record that a build flag decides; None (or "auto") keeps what the record says, else the
    default of the step that decides it (repository.resolve). `recorded` carries the fields a flag sets as given,
    generically, by their parameters (serving.parameters.RECORDED); the other fields each have a rule of their own."""

    # How the pipeline is split into Triton models: a key of ernie_deploy.repository.layouts.LAYOUTS (ensemble,
    # fused, graph-postprocess, tokenizer-in-model); each layout module says what it is and what it fits. "auto": each
    # model the fastest layout that fits it on its runtime (layouts.DEFAULT_LAYOUTS, measured); for a new version of a
    # served model, the layout it is served in.
    layout: str = AUTO
    # Texts longer than max_seq_len (LONG_TEXT): NER reads them in overlapping windows, a classifier keeps the head,
    # or the head and the tail (ernie_deploy.serving.windows).
    long_text: str = AUTO
    window_size: int | None = None  # tokens per window, [CLS] and [SEP] included; None: ModelSpec.window_default
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
    # The names and formats clients send and read (core.io.IOS): ernie-deploy's own, or PaddleNLP's Triton
    # pipeline's tensors (`INPUT`; `label` ids and `confidence`, or `OUTPUT`), so that its clients run unchanged.
    # None: what the model's record says (a new version: its model's), else ernie-deploy's own.
    io: str | None = None
    # Extraction models (UIE): the schema a request that sends none is answered with (JSON in Taskflow's forms). None:
    # what the record says. Refused for other kinds.
    schema: str | None = None
    # The record fields a flag sets as given (serving.parameters.RECORDED): (name, value) pairs, sorted by name (a
    # mapping given becomes them), each value checked by its parameter's type. A field left out keeps what the record
    # says, else takes the parameter's default (repository.resolve); refused for a model whose steps do not read it.
    recorded: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self):
        _check_overrides(self)

    @property
    def overrides(self) -> RecordOverrides:
        """These overrides alone (the build options also carry settings and inputs)."""
        return RecordOverrides(**{f.name: getattr(self, f.name) for f in fields(RecordOverrides)})

    @property
    def limits(self) -> ReadingLimits:
        return ReadingLimits.given(self.max_text_chars, self.max_request_chars)


@dataclass(frozen=True)
class BuildOptions(ServingSettings, RecordOverrides):
    """What `ernie-deploy build` is told: BuildOptions() is the command with no flags, and a flag left out keeps its
    field's default. `.settings` and `.overrides` are its two parts; the rest are the build's inputs."""

    # The texts the reference profile is recorded on (repository.reference: one text per line, a pair model's
    # `text<TAB>text_pair`, or a .tsv / .jsonl split file); None: the model's dev split where the build finds it.
    reference_texts: str | None = None

    def __post_init__(self):
        check_options(self)


def check_options(options: BuildOptions) -> None:
    """Refuse option combinations that Triton would reject at load time, or silently ignore: what BuildOptions'
    construction runs. What depends on the runtime is checked last, after what any runtime refuses, once the runtime
    is settled (runtime "auto" passes until then)."""
    _check_settings(options)
    _check_overrides(options)
    if options.reference_texts is not None and not options.monitor:
        raise BadOptionsError(
            "--reference gives the texts of the reference profile a monitored model is compared with; --no-monitor "
            "builds the model unmonitored, with no reference",
            "drop --no-monitor, or drop --reference",
        )
    if options.runtime != AUTO:
        _check_runtime(options)


def require_settled(settings: ServingSettings) -> None:
    """Refuse settings whose runtime is still "auto": a record is resolved for the runtime it runs on."""
    if settings.runtime == AUTO:
        raise BadOptionsError(
            "runtime 'auto' is settled against the server when the build runs, and this build was not settled",
            "build through ernie_deploy.pipeline.build.build_models (or settle the options with "
            "ernie_deploy.repository.plan.settle first), or name the runtime: runtime='python' or "
            "runtime='onnxruntime'",
        )


def _check_settings(options: ServingSettings) -> None:
    """The serving settings' own refusals, whatever the runtime."""
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


@dataclass(frozen=True)
class Unread:
    """The text of a recorded parameter's flag that its type does not read: kept as given, so that the options refuse
    it as they are made, naming the flag, as they refuse any value of the wrong type."""

    text: str


def recorded_flag(parameter: Parameter) -> str:
    """The `build` flag of a recorded parameter (serving.parameters.RECORDED): its name, spelled as a flag."""
    return "--" + parameter.name.replace("_", "-")


def recorded_default(parameter: Parameter) -> Any:
    """What a model records for a recorded parameter that neither a flag nor its record names: the parameter's
    default; None where that follows from other parameters or there is none (the step then works it out)."""
    return None if parameter.required or isinstance(parameter.default, Derived) else parameter.default


def _recorded(given: Mapping[str, Any] | tuple[tuple[str, Any], ...]) -> tuple[tuple[str, Any], ...]:
    """`given` as (name, value) pairs sorted by name, so that equal overrides are equal: a value None left out (a flag
    not given), each name a recorded parameter's, each value of its type and in the form the type reads back (0 as a
    probability is 0.0, as its flag makes it)."""
    values = dict(given.items() if isinstance(given, Mapping) else given)
    out = []
    for name, value in sorted(values.items()):
        if name not in RECORDED:
            raise BadOptionsError(
                f"{name!r} is not a record field a build option sets", f"use one of: {', '.join(RECORDED.names)}"
            )
        if value is None:
            continue
        parameter = RECORDED[name]
        try:
            if isinstance(value, Unread):
                raise ValueError(value.text)
            text = parameter.type.text(value)
            value = parameter.type.parse(text) if text else value
        except ValueError:
            default = recorded_default(parameter)
            fix = f"pass {parameter.type.what}, or leave it out" + (f" for {default!r}" if default is not None else "")
            shown = value.text if isinstance(value, Unread) else repr(value)
            raise BadOptionsError(f"{recorded_flag(parameter)} {shown} is not {parameter.type.what}", fix) from None
        out.append((name, value))
    return tuple(out)


def _check_overrides(options: RecordOverrides) -> None:
    """The record overrides' own refusals: each value one the step that decides it takes, and no flag of a reading
    the options do not ask for. The recorded values are made sorted pairs here, as the options are made."""
    object.__setattr__(options, "recorded", _recorded(options.recorded))
    if options.long_text not in LONG_TEXT:
        raise BadOptionsError(f"unknown --long-text {options.long_text!r}", f"use one of {', '.join(LONG_TEXT)}")
    if options.window_cut is not None:
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
    if options.ner_decoding is not None:
        check_decoding(options.ner_decoding)
    if options.io is not None:
        check_io(options.io)
    if options.head_tokens is not None and options.long_text != "head_tail":
        raise BadOptionsError(
            "--head-tokens sets how --long-text head_tail splits a text",
            "drop --head-tokens, or add --long-text head_tail",
        )


def _check_runtime(options: BuildOptions) -> None:
    """What the model step's settled runtime refuses."""
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


def _check_limits(options: RecordOverrides) -> None:
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
