"""`ernie-deploy build`: the Triton model repository, configs derived from the ONNX signature."""

from __future__ import annotations

import argparse

from ernie_deploy.cli.arguments import MODEL_HELP, add_model, add_recorded, add_repository
from ernie_deploy.cli.inputs import onnx_file, options_from, static_model
from ernie_deploy.core.errors import BadOptionsError
from ernie_deploy.core.io import IOS
from ernie_deploy.core.tasks import DEFAULT_TASKS, TASKS
from ernie_deploy.pipeline.build import build_models, resolve_build_options
from ernie_deploy.repository.build import model_artifacts
from ernie_deploy.repository.layouts import DEFAULT_LAYOUTS, LAYOUTS
from ernie_deploy.repository.options import (
    AUTO,
    DEVICES,
    LONG_TEXT,
    ORT_GRAPH_LEVELS,
    RUNTIMES,
    SPIN_MODES,
    BuildOptions,
)
from ernie_deploy.repository.reference import MAX_REFERENCE_TEXTS
from ernie_deploy.serving.entities import DECODINGS
from ernie_deploy.serving.limits import CUT, WINDOWS
from ernie_deploy.serving.parameters import POSITION_PROB

# Every flag that fills a BuildOptions field defaults to None, so that the field's own default decides: `build` with
# no flags makes BuildOptions(). The help shows those defaults, read from here.
DEFAULTS = BuildOptions()


class _LayoutFlag(argparse.Action):
    """--fused, --graph-postprocess, --tokenizer-in-model: shorthands of --layout, each refusing another layout."""

    def __init__(self, option_strings, dest, const, **kwargs):
        super().__init__(option_strings, dest, nargs=0, const=const, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        chosen = getattr(namespace, self.dest, None)
        if chosen not in (None, self.const):
            parser.error(f"{option_string} asks for the {self.const} layout, and {chosen} was asked for too: pick one")
        setattr(namespace, self.dest, self.const)


def register(sub) -> None:
    p = sub.add_parser("build", help="assemble the Triton model repository (configs from the ONNX signature)")
    for add in (_model_arguments, _runtime_arguments, _onnxruntime_arguments, _layout_arguments, _reading_arguments):
        add(p)
    p.set_defaults(func=run)


def _model_arguments(p) -> None:
    """Which models, from which files, into which repository."""
    p.add_argument(
        "--task",
        action="append",
        choices=sorted(TASKS),
        help=f"default: the task of the --static model, else {' and '.join(DEFAULT_TASKS)}",
    )
    add_model(
        p,
        f"add or replace this model (repeatable); the others in --repository stay as they are. {MODEL_HELP}",
        repeat=True,
    )
    p.add_argument(
        "--version",
        type=int,
        help="with one --model: add this version of the model beside the one serving (the serving one stays; "
        "`ernie-deploy rollout` switches)",
    )
    p.add_argument(
        "--thresholds",
        dest="thresholds_file",
        help="a multi-label model's per-label thresholds ({label: threshold} JSON, every label, each in [0, 1]) "
        "instead of the ones `convert` chose on the dev split; with exactly one model",
    )
    p.add_argument(
        "--reference",
        dest="reference_texts",
        metavar="FILE",
        help="the texts the model's reference profile is recorded on, like those it will serve (what its live "
        "answers are compared with for drift): one text per line, UTF-8 (a pair model's as text<TAB>text_pair), or a "
        f".tsv / .jsonl split file; at most {MAX_REFERENCE_TEXTS:,} texts; with exactly one model (default: the "
        "model's dev split where `fetch-data` prepared it, else none)",
    )
    add_repository(p, "the repository to add the models to")
    p.add_argument("--static", help="default: artifacts/static/<model or task>")
    p.add_argument("--onnx", help="default: artifacts/onnx/<model or task>/model.onnx")


def _runtime_arguments(p) -> None:
    """How the steps run and batch: backend, device, instances, the dynamic batcher and its queue bounds."""
    p.add_argument(
        "--runtime",
        choices=[AUTO, *RUNTIMES],
        help="model step: ORT backend, or python backend running onnxruntime (auto: what the server has; "
        f"default {DEFAULTS.runtime})",
    )
    p.add_argument("--tritonserver", help="the server binary `auto` inspects")
    p.add_argument("--max-batch-size", type=int, help=f"default {DEFAULTS.max_batch_size}")
    p.add_argument(
        "--instances",
        type=int,
        help=f"instances per step (with --device gpu: model step instances per GPU; default {DEFAULTS.instances})",
    )
    p.add_argument(
        "--device",
        choices=list(DEVICES),
        help="where the model step runs: KIND_CPU or KIND_GPU instances (gpu needs --runtime "
        f"onnxruntime); tokenizer and postprocess stay on the CPU (default {DEFAULTS.device})",
    )
    p.add_argument(
        "--max-queue-delay-us",
        type=int,
        help="dynamic batcher queue delay; 0 adds no latency to a lone request (default "
        f"{DEFAULTS.max_queue_delay_us})",
    )
    p.add_argument(
        "--max-queue-size",
        type=int,
        help="refuse a request (UNAVAILABLE, which the client retries with backoff) when this many wait in a "
        f"step's queue, so latency stays bounded past capacity (0: no bound; default {DEFAULTS.max_queue_size})",
    )
    p.add_argument(
        "--queue-timeout-us",
        type=int,
        help="refuse a request (UNAVAILABLE) that waited this long in a step's queue (0: no timeout; default "
        f"{DEFAULTS.queue_timeout_us})",
    )


def _onnxruntime_arguments(p) -> None:
    """onnxruntime inside the model step: threads, graph optimizations, TensorRT, spinning; ragged batches."""
    p.add_argument(
        "--ort-threads",
        type=int,
        help="onnxruntime intra-op threads of the model step (0: all cores); the ORT backend's "
        f"intra_op_thread_count with --runtime onnxruntime (default {DEFAULTS.ort_threads})",
    )
    p.add_argument(
        "--ort-inter-op-threads",
        type=int,
        help="ORT backend: threads running independent graph nodes at once (inter_op_thread_count, "
        "with the parallel execution_mode it needs; 0: sequential, onnxruntime's default; default "
        f"{DEFAULTS.ort_inter_op_threads})",
    )
    p.add_argument(
        "--ort-graph-level",
        choices=list(ORT_GRAPH_LEVELS),
        help="ORT backend: onnxruntime graph optimizations (optimization.graph.level: extended 1, "
        f"basic -1, disabled 2; all writes no level; default {DEFAULTS.ort_graph_level})",
    )
    p.add_argument(
        "--trt-fp16",
        action="store_true",
        default=None,
        help="ORT backend on GPU: run the model through the TensorRT execution accelerator in FP16 "
        "(needs --runtime onnxruntime --device gpu; TensorRT builds its engines as new input "
        "shapes arrive)",
    )
    p.add_argument(
        "--ort-spinning",
        nargs="?",
        const="always",
        choices=SPIN_MODES,
        help="python model step: how onnxruntime's threads wait for work: off (they sleep), run (busy inside a run, "
        "asleep between runs) or always (busy between runs too: they take the cores the other steps need). The flag "
        f"alone means always (default {DEFAULTS.ort_spinning})",
    )
    p.add_argument(
        "--no-ragged",
        dest="ragged",
        action="store_false",
        default=None,
        help="batch only same-length requests in python steps (Triton's default; for comparison)",
    )
    p.add_argument(
        "--pad-to-multiple-of",
        type=int,
        help="pad token tensors to length buckets of this size (helps batching where ragged can't be used; default "
        f"{DEFAULTS.pad_to_multiple_of})",
    )
    p.add_argument(
        "--layout",
        choices=["auto", *LAYOUTS],
        help="how the model is split into Triton models: "
        + "; ".join(f"{name}: {layout.summary}" for name, layout in LAYOUTS.items())
        + f" (default {DEFAULTS.layout}: the measured fastest that fits each model, "
        + "; ".join(f"on the {runtime} runtime {', else '.join(order)}" for runtime, order in DEFAULT_LAYOUTS.items())
        + "; for --version, the model's own)",
    )


def _layout_arguments(p) -> None:
    """How a model is split into Triton models (repository/layouts)."""
    for flag, layout in (
        ("--fused", "fused"),
        ("--graph-postprocess", "graph-postprocess"),
        ("--tokenizer-in-model", "tokenizer-in-model"),
    ):
        p.add_argument(flag, dest="layout", action=_LayoutFlag, const=layout, help=f"--layout {layout}")
    p.add_argument(
        "--classic",
        action="store_true",
        default=None,
        help="the classic fixed-shape layout, as a benchmark baseline: pad every text to max_seq_len, "
        "no dynamic batching, one instance",
    )
    p.add_argument(
        "--no-monitor",
        dest="monitor",
        action="store_false",
        default=None,
        help="do not count what the model answers (by default the step that answers exports answers per label or "
        "entity type, confidence, text length and how texts were read on the server's /metrics; "
        "docs/OPERATIONS.md)",
    )
    p.add_argument(
        "--cache",
        dest="response_cache",
        action="store_true",
        default=None,
        help="Triton caches the model's answers: a text asked again is answered without running the model (the "
        "server's cache: `serve --cache-size`; docs/SERVING.md#response-cache)",
    )
    p.add_argument(
        "--long-text",
        choices=list(LONG_TEXT),
        help="texts longer than max_seq_len: auto (window for NER, head for classifiers), window (NER reads the "
        "whole text in overlapping windows), head (cut the end), head_tail (classifiers: keep the head and the tail); "
        f"default {DEFAULTS.long_text}",
    )


def _reading_arguments(p) -> None:
    """What a model reads of a text, how it decodes entities, and what one request may cost."""
    p.add_argument(
        "--window-size",
        type=int,
        help="window: tokens per window, [CLS] and [SEP] included, 3 to max_seq_len (default: max_seq_len); a model "
        "trained on short texts reads long ones best in windows of about its training lengths",
    )
    p.add_argument(
        "--window-stride",
        type=int,
        help="window: tokens from one window's start to the next, 1 to max_seq_len - 2 (default: half a window)",
    )
    p.add_argument(
        "--window-cut",
        choices=["sentences", "sliding"],
        help="window: sentences (whole sentences, cut at 。！？；!? and line breaks, packed into each window; only a "
        "sentence longer than a window is read in overlapping ones) or sliding (windows of one size every stride "
        "tokens); default: sentences",
    )
    p.add_argument(
        "--head-tokens",
        type=int,
        help="head_tail: tokens kept from the head, the rest of max_seq_len - 2 from the tail (default: a quarter)",
    )
    p.add_argument(
        "--ner-decoding",
        choices=DECODINGS,
        help="token models only: how logits become entities, over what `export --ner-decoding` recorded (default: "
        "that, else constrained): constrained (the best valid IOB2 sequence) or argmax (as PaddleNLP's own pipeline "
        "decodes: the same entities as PaddleNLP)",
    )
    p.add_argument(
        "--io",
        choices=IOS,
        help="the tensors clients send and read: ernie-deploy's own (default: `text` in; `label`, `confidence`, "
        "`entities`...), or paddlenlp: those of PaddleNLP's ERNIE 3.0 Triton pipeline (`INPUT` in; `label` as the "
        "class id and `confidence`, or `OUTPUT` holding a Python list of {'pos': [start, end], 'label'}, end "
        "inclusive), so its clients run unchanged (docs/FROM_PADDLENLP.md); for a new --version, its model's",
    )
    p.add_argument(
        "--schema",
        help="extraction models only: what a request that sends no schema extracts, JSON in Taskflow's forms, e.g. "
        '\'["人名", "地名"]\' or \'{"人物": ["出生地"]}\' (default: the types the model was trained on, where its '
        "checkpoint says; else each request sends one)",
    )
    add_recorded(
        p,
        POSITION_PROB,
        "extraction models only: how sure the model must be of a span's start and of its end (default: "
        f"{POSITION_PROB.default})",
    )
    p.add_argument(
        "--max-text-chars",
        type=int,
        help="the longest text a request may carry, in characters; a longer one is refused by name before it is "
        f"tokenized (default: {CUT.max_text_chars:,} for a model that reads the cut text, {WINDOWS.max_text_chars:,} "
        "for one that reads windows over all of it, each within about a second on 2 cores; the cost per character "
        "is in docs/RELIABILITY.md)",
    )
    p.add_argument(
        "--max-request-chars",
        type=int,
        help="the most characters one request may carry in all its texts (default: "
        f"{CUT.max_request_chars:,} for a cut text, {WINDOWS.max_request_chars:,} for windows)",
    )


def options(args) -> BuildOptions:
    """BuildOptions from the parsed command line, as given: runtime and layout "auto" (for --version, the model's
    own layout) are settled by pipeline.build when the build runs."""
    return options_from(BuildOptions, args)


def _wanted(args) -> list[tuple[str | None, str | None]]:
    """(task, name) of each model to build, as the flags name them."""
    if args.model:
        if len(args.task or []) > 1:
            raise BadOptionsError("--task with --model checks one model's task", "pass at most one --task")
        return [(args.task[0] if args.task else None, name) for name in args.model]
    return [(task, None) for task in args.task or ([None] if args.static else DEFAULT_TASKS)]


def run(args) -> None:

    wanted = _wanted(args)
    if args.version is not None and len(args.model or []) != 1:
        raise BadOptionsError("--version adds a version of one model", "pass exactly one --model with it")
    if (args.static or args.onnx) and len(wanted) != 1:
        raise BadOptionsError(
            "--static and --onnx name one model's files", "pass exactly one --task or --model with them"
        )
    # Settled and checked before any model is read: a bad combination is the user's first error.
    version_of = args.model[0] if args.version is not None else None
    chosen = resolve_build_options(
        options(args), args.repository, version_of=version_of, tritonserver=args.tritonserver
    )
    entries = []
    for task, name in wanted:
        static = static_model(task, args.static, name)
        entries.append(model_artifacts(static, onnx_file(static, args.onnx, name), name))
    built = build_models(
        entries, chosen, args.repository, args.version, thresholds_file=args.thresholds_file, log=print
    )
    if args.version is not None:
        print(
            f"{args.model[0]}: version {args.version} is ready beside the serving one; switch with "
            f"`ernie-deploy rollout --model {args.model[0]} --to {args.version}`"
        )
        return
    print(f"model step runtime: {built.options.runtime}")
