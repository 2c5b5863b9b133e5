"""The postprocess as ONNX nodes appended to the model (postprocess_graph.py): the shared tokenizer step -> the
model step, which answers the labels itself (on the ORT backend too). One python hop fewer than the ensemble."""

from __future__ import annotations

from pathlib import Path

from ernie_deploy.core.errors import BadOptionsError
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.repository.configs import watch_parameters
from ernie_deploy.repository.layouts.base import Layout, Parts
from ernie_deploy.repository.postprocess_graph import postprocess_graph, write_with_postprocess
from ernie_deploy.repository.signature import model_signature


class GraphPostprocess(Layout):
    name = "graph-postprocess"
    summary = "tokenizer -> model with the postprocess in its graph (classifiers; the ORT backend runs it too)"
    answers_in_graph = True

    def fits(self, model: ModelSpec):
        if problem := super().fits(model):
            return problem
        if not model.task_spec.graph_postprocess:
            return (
                f"--layout {self.name}: the postprocess of {model.kind} model {model.name!r} "
                f"({model.task_spec.postprocess}) is not expressed as an ONNX graph"
            )
        if model.long_text == "window":
            return f"--layout {self.name} reads one logits row per text; --long-text {model.long_text} gives windows"
        return None

    def configs(self, parts: Parts):

        if not parts.model.labels:
            raise BadOptionsError(
                f"--layout {self.name} needs the label names of {parts.model.name!r}",
                "build it in another --layout, or from a model whose record names its labels (`--labels FILE`)",
            )
        # The model step answers what the postprocess would: its outputs are the appended graph's.
        _, outputs = model_signature(postprocess_graph(parts.model, parts.onnx), parts.onnx)
        steps = [parts.tokenizer(), parts.model_step(outputs)]
        if parts.model.serving.monitor and parts.model.serving.runtime == "python":
            # The model step answers, so it is the one that watches the answers (serving.watch). On the ORT backend
            # no python step sees an answer: docs/OPERATIONS.md says what is exported there.
            for key, value in watch_parameters(parts.model).items():
                steps[1].parameters[key].string_value = value
        return [*steps, parts.ensemble(steps, self.name)]

    def homes(self, model: ModelSpec, tokenizer: str):
        # labels.json beside the graph that holds them: the file says which labels it was built with
        return {"tokenizer": tokenizer, "model": model.model_step, "labels": model.model_step}

    def python_steps(self, model: ModelSpec, tokenizer: str, runtime: str):
        return {tokenizer: "tokenizer", **({model.model_step: "onnx"} if runtime == "python" else {})}

    def versioned(self, model: ModelSpec):
        return (model.model_step,)

    def stages(self, model: ModelSpec, tokenizer: str):
        return [tokenizer, model.model_step]

    def graph_models(self, model: ModelSpec):
        return (model.model_step,)

    def write_model_file(self, model, onnx: Path, path: Path):

        write_with_postprocess(model, onnx, path)
