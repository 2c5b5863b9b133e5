"""`ernie-deploy build`: the Triton model repository, configs derived from the ONNX signature."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ernie_deploy.cli.inputs import NAME_HELP, onnx_file, static_model
from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.tasks import DEFAULT_TASKS, TASKS
from ernie_deploy.repository.options import (
    DEFAULT_MAX_BATCH_SIZE,
    DEVICES,
    LONG_TEXT,
    ORT_GRAPH_LEVELS,
    SPIN_MODES,
    BuildOptions,
    check_options,
)
from ernie_deploy.serving.entities import DECODINGS
from ernie_deploy.serving.limits import CUT, WINDOWS


def register(sub) -> None:
    p = sub.add_parser("build", help="assemble the Triton model repository (configs from the ONNX signature)")
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
    p.add_argument(
        "--runtime",
        default="auto",
        choices=["auto", "onnxruntime", "python"],
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
        "--fused",
        action="store_true",
        help="one python model per task (tokenizer + onnxruntime + postprocess) under the ensemble's "
        "name: the same tensors, fewer hops; python runtime only",
    )
    p.add_argument(
        "--graph-postprocess",
        action="store_true",
        help="classifiers: append softmax, argmax and the label lookup to the ONNX graph, so the model step "
        "answers label_id, label and confidence and the ensemble is tokenizer -> model (one python hop fewer; "
        "the ORT backend runs it too)",
    )
    p.add_argument(
        "--tokenizer-in-model",
        action="store_true",
        help="run the tokenizer inside the python model step (text -> logits in one process), the postprocess "
        "a step of its own: one hop fewer than the ensemble, less than --fused; python runtime only",
    )
    p.add_argument(
        "--classic",
        action="store_true",
        help="the classic fixed-shape layout, as a benchmark baseline: pad every text to max_seq_len, "
        "no dynamic batching, one instance",
    )
    p.add_argument(
        "--long-text",
        default="auto",
        choices=list(LONG_TEXT),
        help="texts longer than max_seq_len: auto (window for NER, head for classifiers), window (NER reads the "
        "whole text in overlapping windows), head (cut the end), head_tail (classifiers: keep the head and the tail)",
    )
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
    p.set_defaults(func=run)


def run(args) -> None:
    from ernie_deploy.repository.build import TaskArtifacts, build, pick_runtime
    from ernie_deploy.server.binary import available_backends, find_tritonserver

    if args.name:
        if len(args.task or []) > 1:
            raise ErnieDeployError("--task with --name checks one model's task", "pass at most one --task")
        wanted = [(args.task[0] if args.task else None, name) for name in args.name]
    else:
        wanted = [(task, None) for task in args.task or ([None] if args.static else DEFAULT_TASKS)]
    if args.version is not None and len(args.name or []) != 1:
        raise ErnieDeployError("--version adds a version of one model", "pass exactly one --name with it")
    if (args.static or args.onnx) and len(wanted) != 1:
        raise ErnieDeployError(
            "--static and --onnx name one model's files", "pass exactly one --task or --name with them"
        )
    runtime = args.runtime
    if runtime == "auto" and (args.fused or args.tokenizer_in_model):
        runtime = "python"  # these layouts run onnxruntime inside a python model, whatever backends the server has
    if runtime == "auto":
        try:
            backends = available_backends(find_tritonserver(args.tritonserver))
        except ErnieDeployError:  # no server here yet: the python model step runs on any tritonserver
            backends = set()
        runtime = pick_runtime(backends)
    options = BuildOptions(
        runtime=runtime,
        max_batch_size=args.max_batch_size,
        instances=args.instances,
        max_queue_delay_us=args.max_queue_delay_us,
        max_queue_size=args.max_queue_size,
        queue_timeout_us=args.queue_timeout_us,
        ort_threads=args.ort_threads,
        classic=args.classic,
        ragged=not args.no_ragged,
        pad_to_multiple_of=args.pad_to_multiple_of,
        fused=args.fused,
        graph_postprocess=args.graph_postprocess,
        tokenizer_in_model=args.tokenizer_in_model,
        ort_spinning=args.ort_spinning or BuildOptions.ort_spinning,
        ort_graph_level=args.ort_graph_level,
        ort_inter_op_threads=args.ort_inter_op_threads,
        device=args.device,
        trt_fp16=args.trt_fp16,
        long_text=args.long_text,
        window_size=args.window_size,
        window_stride=args.window_stride,
        head_tokens=args.head_tokens,
        ner_decoding=args.ner_decoding,
        max_text_chars=args.max_text_chars,
        max_request_chars=args.max_request_chars,
    )
    check_options(options)  # before reading any model: a bad combination is the user's first error
    entries = []
    for task, name in wanted:
        static = static_model(task, args.static, name)
        entries.append(
            TaskArtifacts(
                static.task.named(name),
                onnx_file(static, args.onnx, name),
                static.vocab_file,
                static.labels,
                ner_decoding=static.ner_decoding,
            )
        )
    if args.thresholds:
        if len(entries) != 1 or not entries[0].task.thresholds:
            raise ErnieDeployError(
                "--thresholds replaces one multi-label model's thresholds; this build has "
                + ", ".join(f"{e.task.ensemble} ({e.task.name})" for e in entries),
                "build exactly one multi_label model with it (--task multi_label or --name N)",
            )
        entries[0] = replace(entries[0], thresholds=Path(args.thresholds))
    if args.version is not None:
        from ernie_deploy.repository.build import build_version

        for path in build_version(entries[0], args.repository, options, version=args.version):
            print(f"wrote {path}")
        print(
            f"{args.name[0]}: version {args.version} is ready beside the serving one; switch with "
            f"`ernie-deploy rollout {args.name[0]} --to {args.version}`"
        )
        return
    for path in build(entries, args.repository, options):
        print(f"wrote {path}")
    print(f"model step runtime: {runtime}")
