"""The repositories benchmarks/served_answers.py compares: the build commands, run in the checkout under test
(`python -m benchmarks.served_answers build`; the module's docstring lists what each repository serves)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ernie_deploy.core.errors import BadCheckpointError, BadDataError, BadOptionsError
from ernie_deploy.core.tasks import TASKS
from ernie_deploy.fetch.shapes import get_shape, make_checkpoint


@dataclass(frozen=True)
class Model:
    """A model `build` exports and converts once: its task, name and where its checkpoint comes from."""

    task: str
    name: str  # the artifacts' folder and the served name
    shape: str | None = None  # an ERNIE 3.0 shape with random weights (fetch.shapes) instead of demo/<task>


DEMO = [Model(t, t) for t in ("seq_cls", "token_cls", "pair_cls", "multi_label", "uie")]
NANO = Model("seq_cls", "news_nano", shape="nano")

# Each repository: (name, [build arguments per `ernie-deploy build` run]); runs fill one repository in order.
PY = ["--runtime", "python"]


def _tasks(*tasks: str) -> list[str]:
    return [arg for task in tasks for arg in ("--task", task)]


def _named(task: str, name: str) -> list[str]:
    """Build arguments for another model of `task`'s demo checkpoint, served as `name`."""
    inputs = "{inputs}"  # filled in by build_plan
    return [
        "--task",
        task,
        "--model",
        name,
        "--static",
        f"{inputs}/static/{task}",
        "--onnx",
        f"{inputs}/onnx/{task}/model.onnx",
    ]


ALL = tuple(m.task for m in DEMO)
# An extraction model runs its model again for each stage of a schema, which a layout of fixed steps cannot: uie is
# served fused (or classic) alone. Only seq_cls and pair_cls have their postprocess as an ONNX graph, and PaddleNLP's
# pipeline has tensors for neither label sets nor extraction.
STEPPED = ("seq_cls", "token_cls", "pair_cls", "multi_label")
REPOSITORIES: list[tuple[str, list[list[str]]]] = [
    (
        "default",
        [
            [*PY, *_tasks(*ALL)],
            [*PY, "--task", "seq_cls", "--model", NANO.name],
            [*PY, *_named("uie", "uie_people"), "--schema", '["人名", "地名"]'],
        ],
    ),
    ("ensemble", [[*PY, "--layout", "ensemble", *_tasks(*STEPPED)]]),
    ("graph", [[*PY, "--layout", "graph-postprocess", *_tasks("seq_cls", "pair_cls")]]),
    ("tim", [[*PY, "--layout", "tokenizer-in-model", *_tasks(*STEPPED)]]),
    (
        "long",
        [
            [*PY, "--task", "token_cls", "--long-text", "window"],
            [*PY, *_named("token_cls", "ner_sliding"), "--long-text", "window", "--window-cut", "sliding"],
            [*PY, *_named("token_cls", "ner_small_windows"), "--long-text", "window", "--window-size", "32"],
            [*PY, *_named("token_cls", "ner_head"), "--long-text", "head"],
            [*PY, "--task", "seq_cls", "--long-text", "head_tail"],
        ],
    ),
    ("paddlenlp", [[*PY, "--io", "paddlenlp", *_tasks("seq_cls", "token_cls", "pair_cls")]]),
    # `build --classic --task uie` writes an ensemble the server refuses (its schema input unused, no tokenizer for
    # the postprocess), so the baseline is the four others.
    ("classic", [[*PY, "--classic", *_tasks(*STEPPED)]]),
]


def make_shape(args) -> int:
    """The checkpoint of a shaped model: demo/<task>'s labels and vocabulary over an ERNIE 3.0 shape, random weights
    from the package's fixed seed (fetch.shapes). `build` makes it only where --inputs lacks it, so both checkouts
    serve the same one."""

    demo = Path("demo") / args.task
    config = json.loads((demo / "config.json").read_text(encoding="utf-8"))
    labels = [config["id2label"][str(i)] for i in range(len(config["id2label"]))]
    vocab = (demo / "vocab.txt").read_text(encoding="utf-8").splitlines()
    make_checkpoint(get_shape(args.shape), TASKS[args.task], labels, vocab, args.out)
    return 0


def prepare_commands(model: Model, inputs: Path) -> list[list[str]]:
    """The commands that make `model`'s static and ONNX models in `inputs`, or none when they are there."""
    if (inputs / "onnx" / model.name / "model.onnx").exists():
        return []
    cli = ["ernie-deploy"]
    commands = []
    if model.shape:
        checkpoint = inputs / "shapes" / model.shape
        commands.append(
            ["python", "-m", "benchmarks.served_answers", "make-shape", model.shape, model.task, str(checkpoint)]
        )
        commands.append([*cli, "fetch", str(checkpoint), "--task", model.task, "--model", model.name])
    else:
        commands.append([*cli, "fetch", "--bootstrap", "--task", model.task])
    named = ["--model", model.name] if model.shape else []
    commands.append([*cli, "export", "--task", model.task, *named])
    commands.append([*cli, "convert", "--task", model.task, *named])
    return commands


def build_plan(out: Path, inputs: Path) -> list[list[str]]:
    plan = []
    for model in [*DEMO, NANO]:
        plan.extend(prepare_commands(model, inputs))
    for name, runs in REPOSITORIES:
        for args in runs:
            args = [a.replace("{inputs}", str(inputs)) for a in args]
            plan.append(["ernie-deploy", "build", "--repository", str(out / name), *args])
    return plan


def build(args) -> int:
    out, inputs = Path(args.out).absolute(), Path(args.inputs).absolute()
    if not (inputs / "data").is_dir():
        raise BadDataError(
            f"{inputs}/data holds no datasets: export, convert and build read the splits from there",
            f"link the prepared splits in: ln -s $PWD/artifacts/data {inputs}/data (or run `ernie-deploy fetch-data` "
            f"with ERNIE_DEPLOY_ARTIFACTS={inputs})",
        )
    plan = build_plan(out, inputs)
    env = {**os.environ, "ERNIE_DEPLOY_ARTIFACTS": str(inputs), "PYTHONPATH": os.getcwd()}
    if args.print:
        print(
            "#!/usr/bin/env bash\n# The repositories of benchmarks/served_answers.py, run from the checkout under test."
        )
        print("set -euo pipefail")
        print(f'export ERNIE_DEPLOY_ARTIFACTS={shlex.quote(str(inputs))} PYTHONPATH="$PWD"')
        for command in plan:
            print(shlex.join(command))
        return 0
    taken = [name for name, _ in REPOSITORIES if (out / name).exists()]
    if taken:
        raise BadOptionsError(
            f"{out} already holds repositories {', '.join(taken)}: a build adds to what is there",
            "pass an --out that does not exist yet",
        )
    for command in plan:
        print("+", shlex.join(command), flush=True)
        started = time.monotonic()
        done = subprocess.run(command, env=env)
        if done.returncode:
            raise BadCheckpointError(
                f"{shlex.join(command[:3])} ... exited {done.returncode}",
                "read its output above; the repositories before it are built",
            )
        print(f"  {time.monotonic() - started:.1f} s", flush=True)
    return 0
