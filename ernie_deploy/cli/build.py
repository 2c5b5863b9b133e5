"""`ernie-deploy build`: the Triton model repository, configs derived from the ONNX signature."""

from __future__ import annotations

import argparse

from ernie_deploy.cli.inputs import NAME_HELP, onnx_file, options_from, static_model
from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.tasks import DEFAULT_TASKS, TASKS
from ernie_deploy.pipeline.options import AUTO
from ernie_deploy.repository.layouts import DEFAULT_LAYOUTS, LAYOUTS
from ernie_deploy.repository.options import (
    DEFAULT_MAX_BATCH_SIZE,
    DEVICES,
    LONG_TEXT,
    ORT_GRAPH_LEVELS,
    RUNTIMES,
    SPIN_MODES,
    BuildOptions,
)
from ernie_deploy.serving.entities import DECODINGS
from ernie_deploy.serving.limits import CUT, WINDOWS


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
    p.add_argument(
        "--name",
        action="append",
        help=f"add or replace this model (repeatable); the others in --repository stay as they are. {NAME_HELP}",
    )
    p.add_argument(
        "--version",
        type=int,
        help="with one --name: add this version of the model beside the one serving (the serving one stays; "
        "`ernie-deploy rollout` switches)",
    )
    p.add_argument(
        "--thresholds",
        help="a multi-label model's per-label thresholds ({label: threshold} JSON, every label, each in [0, 1]) "
        "instead of the ones `convert` chose on the dev split; with exactly one model",
    )
    p.add_argument("--repository", default="models")
    p.add_argument("--static", help="default: artifacts/static/<task>")
    p.add_argument("--onnx", help="default: artifacts/onnx/<task>/model.onnx")


def _runtime_arguments(p) -> None:
    """How the steps run and batch: backend, device, instances, the dynamic batcher and its queue bounds."""
    p.add_argument(
        "--runtime",
        default=AUTO,
        choices=[AUTO, *RUNTIMES],
        help="model step: ORT backend, or python backend running onnxruntime (auto: what the server has)",
    )
    p.add_argument("--tritonserver", help="the server binary `auto` inspects")
    p.add_argument("--max-batch-size", type=int, default=DEFAULT_MAX_BATCH_SIZE)
    p.add_argument(
        "--instances", type=int, default=1, help="instances per step (with --device gpu: model step instances per GPU)"
    )
    p.add_argument(
        "--device",
        default="cpu",
        choices=list(DEVICES),
        help="where the model step runs: KIND_CPU or KIND_GPU instances (gpu needs --runtime "
        "onnxruntime); tokenizer and postprocess stay on the CPU",
    )
    p.add_argument(
        "--max-queue-delay-us",
        type=int,
        default=0,
        help="dynamic batcher queue delay; 0 adds no latency to a lone request",
    )
    p.add_argument(
        "--max-queue-size",
        type=int,
        default=0,
        help="refuse a request (UNAVAILABLE, which the client retries with backoff) when this many wait in a "
        "step's queue, so latency stays bounded past capacity (0: no bound)",
    )
    p.add_argument(
        "--queue-timeout-us",
        type=int,
        default=0,
        help="refuse a request (UNAVAILABLE) that waited this long in a step's queue (0: no timeout)",
    )


def _onnxruntime_arguments(p) -> None:
    """onnxruntime inside the model step: threads, graph optimizations, TensorRT, spinning; ragged batches."""
    p.add_argument(
        "--ort-threads",
        type=int,
        default=0,
        help="onnxruntime intra-op threads of the model step (0: all cores); the ORT backend's "
        "intra_op_thread_count with --runtime onnxruntime",
    )
    p.add_argument(
        "--ort-inter-op-threads",
        type=int,
        default=0,
        help="ORT backend: threads running independent graph nodes at once (inter_op_thread_count, "
        "with the parallel execution_mode it needs; 0: sequential, onnxruntime's default)",
    )
    p.add_argument(
        "--ort-graph-level",
        default="all",
        choices=list(ORT_GRAPH_LEVELS),
        help="ORT backend: onnxruntime graph optimizations (optimization.graph.level: extended 1, "
        "basic -1, disabled 2; all, the default, writes no level)",
    )
    p.add_argument(
        "--trt-fp16",
        action="store_true",
        help="ORT backend on GPU: run the model through the TensorRT execution accelerator in FP16 "
        "(needs --runtime onnxruntime --device gpu; TensorRT builds its engines as new input "
        "shapes arrive)",
    )
    p.add_argument(
        "--ort-spinning",
        nargs="?",
        const="always",
        choices=SPIN_MODES,
        help="python model step: how onnxruntime's threads wait for work: off (they sleep; the default), run "
        "(busy inside a run, asleep between runs) or always (busy between runs too: they take the cores the other "
        "steps need). The flag alone means always",
    )
    p.add_argument(
        "--no-ragged",
        action="store_true",
        help="batch only same-length requests in python steps (Triton's default; for comparison)",
    )
    p.add_argument(
        "--pad-to-multiple-of",
        type=int,
        default=1,
        help="pad token tensors to length buckets of this size (helps batching where ragged can't be used)",
    )
    p.add_argument(
        "--layout",
        choices=["auto", *LAYOUTS],
        help="how the model is split into Triton models: "
        + "; ".join(f"{name}: {layout.summary}" for name, layout in LAYOUTS.items())
        + " (default auto: the measured fastest that fits each model, "
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
        help="the classic fixed-shape layout, as a benchmark baseline: pad every text to max_seq_len, "
        "no dynamic batching, one instance",
    )
    p.add_argument(
        "--cache",
        dest="response_cache",
        action="store_true",
        help="Triton caches the model's answers: a text asked again is answered without running the model (the "
        "server's cache: `serve --cache-size`; docs/SERVING.md#response-cache)",
    )
    p.add_argument(
        "--long-text",
        default="auto",
        choices=list(LONG_TEXT),
        help="texts longer than max_seq_len: auto (window for NER, head for classifiers), window (NER reads the "
        "whole text in overlapping windows), head (cut the end), head_tail (classifiers: keep the head and the tail)",
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
    """BuildOptions from the parsed command line, as given: runtime "auto" and no layout (the default, or for
    --version the model's own) are settled by pipeline.build when the build runs."""
    return options_from(BuildOptions, args, ragged=not args.no_ragged, layout=args.layout)


def _wanted(args) -> list[tuple[str | None, str | None]]:
    """(task, name) of each model to build, as the flags name them."""
    if args.name:
        if len(args.task or []) > 1:
            raise ErnieDeployError("--task with --name checks one model's task", "pass at most one --task")
        return [(args.task[0] if args.task else None, name) for name in args.name]
    return [(task, None) for task in args.task or ([None] if args.static else DEFAULT_TASKS)]


def run(args) -> None:
    from ernie_deploy.pipeline.build import build_models, resolve_build_options
    from ernie_deploy.repository.build import model_artifacts

    wanted = _wanted(args)
    if args.version is not None and len(args.name or []) != 1:
        raise ErnieDeployError("--version adds a version of one model", "pass exactly one --name with it")
    if (args.static or args.onnx) and len(wanted) != 1:
        raise ErnieDeployError(
            "--static and --onnx name one model's files", "pass exactly one --task or --name with them"
        )
    # Settled and checked before any model is read: a bad combination is the user's first error.
    version_of = args.name[0] if args.version is not None else None
    chosen = resolve_build_options(
        options(args), args.repository, version_of=version_of, tritonserver=args.tritonserver
    )
    entries = []
    for task, name in wanted:
        static = static_model(task, args.static, name)
        entries.append(model_artifacts(static, onnx_file(static, args.onnx, name), name))
    built = build_models(entries, chosen, args.repository, args.version, thresholds=args.thresholds, log=print)
    if args.version is not None:
        print(
            f"{args.name[0]}: version {args.version} is ready beside the serving one; switch with "
            f"`ernie-deploy rollout {args.name[0]} --to {args.version}`"
        )
        return
    print(f"model step runtime: {built.options.runtime}")
