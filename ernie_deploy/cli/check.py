"""`ernie-deploy check`: lint a model repository before serving."""

from __future__ import annotations

from pathlib import Path

from ernie_deploy.cli.arguments import add_repository
from ernie_deploy.core.errors import BadRepositoryError


def register(sub) -> None:
    p = sub.add_parser(
        "check",
        help="lint a model repository before serving: configs, versions, ONNX "
        "signatures, ensemble wiring, python models, warmup files",
    )
    add_repository(p, "the repository to check", positional=True)
    p.set_defaults(func=run)


def run(args) -> None:
    from ernie_deploy.repository.check import check_repository, model_dirs, ner_decodings
    from ernie_deploy.repository.served import load_plan, served_limits, served_models

    problems = check_repository(args.repository)
    for problem in problems:
        print(problem)
    plan = load_plan(args.repository)
    unmade = plan.skipped
    for model in unmade:
        print(model.note(args.repository))
    for entry in plan.orphans:
        print(f"{entry}: never made, and no model uses it: remove {Path(args.repository) / entry}")
    for name, spec in ({} if problems else served_models(args.repository)).items():
        reading = f", long texts: {spec.long_text}" if spec.long_text else ""
        window = f" of {spec.window_size} tokens (stride {spec.window_stride})" if spec.window_size else ""
        wire = spec.wire
        speaks = (
            ""
            if wire.native
            else (
                f", {wire.name} tensors: {', '.join(t.name for t in wire.input_specs())} in, "
                f"{', '.join(t.name for t in wire.output_specs())} out"
            )
        )
        print(f"{name}: {spec.task} model, layout {spec.layout}{reading}{window}{speaks}")
        print(f"{name}: serving version {spec.version}: {spec.summary()}")
    for name, decoding in ner_decodings(args.repository).items():
        print(f"{name}: NER decoding {decoding}")
    for name, (step, limits) in served_limits(args.repository).items():
        print(
            f"{name}: texts of at most {limits.max_text_chars:,} characters, {limits.max_request_chars:,} per request "
            f"(checked by {step})"
        )
    if problems:
        # main() turns this into exit status 2
        raise BadRepositoryError(f"{len(problems)} problem(s) in {args.repository}", "see the lines above")
    never = f"; {len(unmade)} never made, left unloaded by `tritonserver` and `serve`" if unmade else ""
    print(f"ok: {len(model_dirs(args.repository))} models checked{never}")
