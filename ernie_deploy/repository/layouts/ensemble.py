"""The default layout: a shared tokenizer step -> the model step -> the postprocess step, wired by an ensemble.

Three processes work on different requests at once, and the tokenizer is shared by every model of one vocabulary.
"""

from __future__ import annotations

from ernie_deploy.core.tasks import TaskSpec
from ernie_deploy.repository.layouts.base import Layout, Parts


class Ensemble(Layout):
    name = "ensemble"
    summary = (
        "tokenizer -> model -> postprocess, three Triton models wired by an ensemble (the default where fused is not)"
    )

    def configs(self, parts: Parts):
        steps = [parts.tokenizer(), parts.model(), parts.postprocess()]
        return [*steps, parts.ensemble(steps, self.name)]

    def homes(self, task: TaskSpec, tokenizer: str):
        return {"tokenizer": tokenizer, "model": task.model_step, "labels": task.postprocess_step}

    def python_steps(self, task: TaskSpec, tokenizer: str, runtime: str):
        steps = {tokenizer: "tokenizer", task.postprocess_step: task.postprocess}
        if runtime == "python":
            steps[task.model_step] = "onnx"
        return steps

    def versioned(self, task: TaskSpec):
        return (task.model_step, task.postprocess_step)

    def stages(self, task: TaskSpec, tokenizer: str):
        return [tokenizer, task.model_step, task.postprocess_step]

    def graph_models(self, task: TaskSpec):
        return (task.model_step,)
