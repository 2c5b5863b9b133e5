"""What a layout is: how one model's pipeline (tokenize -> ONNX model -> postprocess) is split into Triton models.

A layout is a value (`Layout`): it owns which Triton models a served model consists of, their configs, which of
them holds each file (tokenizer.json, model.onnx, labels.json), which python step each one runs, which of them carry
the model's versions, and which of them a request runs through. Every stage asks the layout; none recovers a role
from a model's name or reads a layout back from config parameters (a repository built before layouts were recorded
is recognised once, in `layouts.layout_of`).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from tritonclient.grpc import model_config_pb2 as mc

from ernie_deploy.core.errors import BadCheckpointError, BadOptionsError
from ernie_deploy.core.files import atomic_path
from ernie_deploy.core.settings import ServingSettings
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.core.tasks import MODEL_INPUTS, TOKENIZER_OUTPUTS, TOKENIZER_STEP
from ernie_deploy.repository.configs import (
    WINDOW_PARAMETERS,
    ensemble_config,
    model_config,
    postprocess_config,
    tokenizer_config,
)
from ernie_deploy.repository.signature import onnx_signature
from ernie_deploy.repository.windows import window_model, windowed_signature

# The files a served model needs, each held by one Triton model of its layout (`Layout.homes`).
FILES = ("tokenizer", "model", "labels")
# The config parameter of a served model's entry (the model users call) that records its layout.
LAYOUT_PARAMETER = "layout"


@dataclass
class Parts:
    """The pieces every layout composes, for one model (its record as served: name, labels, decoding, windows, limits,
    serving settings): the checked ONNX signature and the typed configs of the tokenizer, model and postprocess steps
    as the default ensemble would have them."""

    model: ModelSpec
    onnx: Path
    tokenizer_step: str = TOKENIZER_STEP
    pad_token_id: int = 0
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)

    def __post_init__(self):
        self.onnx = Path(self.onnx)
        self.inputs, self.outputs = checked_signature(self.model, self.onnx)
        if self.model.long_text == "window" and not self.model.kind_facts.staged:
            # The model step takes a text's windows, [windows, tokens] per text, and returns their logits (a python
            # step flattens them; for the ORT backend `build` wraps model.onnx the same way: repository/windows.py).

            self.inputs, self.outputs = windowed_signature(self.inputs, self.outputs)

    def tokenizer(self) -> mc.ModelConfig:
        return tokenizer_config(self.tokenizer_step, self.model)

    def model_step(self, outputs=None) -> mc.ModelConfig:
        return model_config(self.model, self.inputs, outputs or self.outputs, self.pad_token_id)

    def postprocess(self) -> mc.ModelConfig:
        return postprocess_config(self.model, self.outputs[0])

    def own_parameters(self, *steps: mc.ModelConfig) -> dict[str, str]:
        """The parameters of `steps` merged into one config of the model's own (a fused model, the tokenizer inside
        the model step): each step's parameters are generated from the one record, so none disagree; a shared
        tokenizer's windows stay out where the model reads no windows (its record has none)."""
        params = {key: value.string_value for step in steps for key, value in step.parameters.items()}
        if self.model.long_text != "window":
            for key in WINDOW_PARAMETERS:
                params.pop(key, None)
        return params

    def ensemble(self, steps: list[mc.ModelConfig], layout: str) -> mc.ModelConfig:
        config = ensemble_config(self.model, steps)
        config.parameters[LAYOUT_PARAMETER].string_value = layout
        return config


def checked_signature(model: ModelSpec, onnx_path: Path) -> tuple[list, list]:
    """The converted model's inputs (in the order the pipeline feeds them) and outputs; names, types and ranks are
    checked against what the pipeline feeds and reads (the kind's model outputs: Kind.model_outputs), not assumed."""
    inputs, outputs = onnx_signature(onnx_path)
    names = sorted(s.name for s in inputs)
    expected = list(model.kind_facts.model_outputs)
    if names != sorted(MODEL_INPUTS) or [o.name for o in outputs] != expected:
        raise BadCheckpointError(
            f"{onnx_path} has inputs {names} and outputs {[o.name for o in outputs]}; "
            f"the pipeline feeds {list(MODEL_INPUTS)} and reads {', '.join(map(repr, expected))}",
            "convert with `ernie-deploy convert`, which names the tensors",
        )
    by_name = {s.name: s for s in inputs}
    tokenized = {t.name: t for t in TOKENIZER_OUTPUTS}
    for name in MODEL_INPUTS:
        if by_name[name].data_type != tokenized[name].data_type or len(by_name[name].dims) != 1:
            raise BadCheckpointError(
                f"{onnx_path}: input {name!r} is {by_name[name].data_type} with dims {list(by_name[name].dims)} "
                f"per item; the tokenizer feeds {tokenized[name].data_type} [-1]",
                "export with int64 [batch, sequence] inputs (`ernie-deploy export`)",
            )
    rank = model.task_spec.logits_rank
    per_item = "[tokens, classes]" if rank == 2 else "[classes]" if model.kind_facts.label_head else "[tokens]"
    if model.kind_facts.own_export:  # a vector or a score per text, under the pipeline's output name
        per_item = "[dim]"
    for output in outputs:
        if len(output.dims) != rank:
            raise BadCheckpointError(
                f"{onnx_path}: {output.name!r} has dims {list(output.dims)} per item, which does not fit task "
                f"{model.task} ({per_item})",
                f"export the checkpoint with --task {model.task}, or pick the task the model was trained for",
            )
    return [by_name[n] for n in MODEL_INPUTS], outputs


class Layout:
    """One way to lay a model out as Triton models. Subclasses are registered by their module in this package."""

    name: ClassVar[str]  # `build --layout NAME`, recorded on the model's entry config
    summary: ClassVar[str]  # one line for --help and `check`
    # Model-step runtimes the layout can run on: a layout that runs onnxruntime inside a python model has only one.
    runtimes: ClassVar[tuple[str, ...]] = ("onnxruntime", "python")
    # Whether its texts go through the tokenizer step that models of one vocabulary share.
    shares_tokenizer: ClassVar[bool] = True
    # Whether the model.onnx it serves answers the labels itself (the postprocess appended to the graph).
    answers_in_graph: ClassVar[bool] = False
    # Whether it runs a model's whole pipeline in one python model, where a staged kind's model can run once per stage
    # of a request (Kind.staged).
    runs_stages: ClassVar[bool] = False

    def __repr__(self) -> str:
        return f"Layout({self.name!r})"

    # What fits -----------------------------------------------------------------------------------------------------
    def fits(self, model: ModelSpec) -> str | None:
        """Why `model` (its reading and settings decided) cannot be laid out this way, or None."""
        if model.kind_facts.staged and not self.runs_stages:
            return (
                f"--layout {self.name} runs each step once per request, but {model.kind} model {model.name!r} runs its "
                "model again for each stage, prompted by what the stage before found"
            )
        return None

    def check(self, model: ModelSpec) -> None:
        problem = self.fits(model)
        if problem:
            raise BadOptionsError(
                problem, f"build {model.name!r} with another --layout (build models of other kinds separately)"
            )

    def check_serving_settings(self, options: ServingSettings) -> None:
        """Refuse serving settings this layout cannot honour for any model."""
        if options.runtime not in self.runtimes:
            raise BadOptionsError(
                f"--layout {self.name} runs onnxruntime inside a python model, but the model step was asked to run "
                f"on the {options.runtime} backend",
                f"build it with --runtime python, or pick a layout that runs on {options.runtime} "
                "(ensemble, graph-postprocess)",
            )
        if options.classic and self.name != "ensemble":
            raise BadOptionsError(
                f"--classic is the fixed-shape baseline of the ensemble layout; --layout {self.name} is another one",
                "drop --classic, or build with --layout ensemble",
            )

    # What it is made of --------------------------------------------------------------------------------------------
    def configs(self, parts: Parts) -> list[mc.ModelConfig]:
        """Every Triton model of this layout for one model, the entry (the model users call) last."""
        raise NotImplementedError

    def homes(self, model: ModelSpec, tokenizer: str) -> dict[str, str]:
        """Each of FILES -> the Triton model whose version folder holds it."""
        raise NotImplementedError

    def answering(self, model: ModelSpec, tokenizer: str) -> str:
        """The Triton model whose step writes the model's answers: the one beside labels.json in every layout. It
        holds the reference profile (reference.json), exports what the model answers and, during a shadow, mirrors
        requests to the candidate (serving/watch.py)."""
        return self.homes(model, tokenizer)["labels"]

    def python_steps(self, model: ModelSpec, tokenizer: str, runtime: str) -> dict[str, str]:
        """Triton model -> the serving step (a key of ernie_deploy.serving.steps.STEPS) its model.py runs."""
        raise NotImplementedError

    def versioned(self, model: ModelSpec) -> tuple[str, ...]:
        """The Triton models whose version folders hold one version of the model (the rest are shared or have no
        files: a shared tokenizer, an ensemble)."""
        raise NotImplementedError

    def stages(self, model: ModelSpec, tokenizer: str) -> list[str]:
        """The Triton models a request runs through, in order (what `stats` reports per stage)."""
        raise NotImplementedError

    def graph_models(self, model: ModelSpec) -> tuple[str, ...]:
        """The Triton models whose tensors are those of the model.onnx they hold (what `check` compares)."""
        return ()

    # Its files ---------------------------------------------------------------------------------------------------
    def write_model_file(self, model: ModelSpec, onnx: Path, path: Path):
        """model.onnx as converted; a windowed model on the ORT backend takes [batch, windows, tokens]
        (repository/windows.py)."""
        if model.serving.runtime == "onnxruntime" and model.long_text == "window":
            window_model(onnx, path)
            return
        with atomic_path(path, suffix=".onnx") as tmp:
            shutil.copyfile(onnx, tmp)
