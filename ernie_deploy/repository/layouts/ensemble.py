"""The default layout: a shared tokenizer step -> the model step -> the postprocess step, wired by an ensemble.

Three processes work on different requests at once, and the tokenizer is shared by every model of one vocabulary.
"""

from __future__ import annotations

from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.repository.layouts.base import Layout, Parts


class Ensemble(Layout):
    name = "ensemble"
    summary = (
        "tokenizer -> model -> postprocess, three Triton models wired by an ensemble (the default where fused is not)"
    )

    def configs(self, parts: Parts):
        steps = [parts.tokenizer(), parts.model_step(), parts.postprocess()]
        return [*steps, parts.ensemble(steps, self.name)]

    def homes(self, model: ModelSpec, tokenizer: str):
        return {"tokenizer": tokenizer, "model": model.model_step, "labels": model.postprocess_step}

    def python_steps(self, model: ModelSpec, tokenizer: str, runtime: str):
        steps = {tokenizer: "tokenizer", model.postprocess_step: model.task_spec.postprocess}
        if runtime == "python":
            steps[model.model_step] = "onnx"
        return steps

    def versioned(self, model: ModelSpec):
        return (model.model_step, model.postprocess_step)

    def stages(self, model: ModelSpec, tokenizer: str):
        return [tokenizer, model.model_step, model.postprocess_step]

    def graph_models(self, model: ModelSpec):
        return (model.model_step,)
