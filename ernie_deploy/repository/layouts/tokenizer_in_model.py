"""The tokenizer inside the python model step (text -> logits in one process), the postprocess a step of its own:
one hop fewer than the ensemble, one more than the fused layout."""

from __future__ import annotations

from ernie_deploy.core.tasks import MODEL_INPUTS, TaskSpec
from ernie_deploy.repository.configs import base_config
from ernie_deploy.repository.layouts.base import Layout, Parts
from ernie_deploy.repository.signature import spec_of


class TokenizerInModel(Layout):
    name = "tokenizer-in-model"
    summary = "tokenizer and model in one python step -> postprocess (python runtime only)"
    runtimes = ("python",)
    shares_tokenizer = False

    def configs(self, parts: Parts):
        tokenizer, model, post = parts.tokenizer(), parts.model(), parts.postprocess()
        task = parts.task
        # It takes the ensemble's inputs and returns the logits and whatever tokenizer outputs the postprocess or the
        # caller reads (offsets, lengths, truncated; the windows' positions), so the postprocess step stays as it is.
        read = {t.name for t in post.input} | {o.name for o in task.outputs}
        outputs = [spec_of(o) for o in model.output] + [spec_of(o) for o in tokenizer.output if o.name in read]
        params = {key: value.string_value for step in (tokenizer, model) for key, value in step.parameters.items()}
        if [t.name for t in model.input] != list(MODEL_INPUTS):
            params["long_text"] = "window"  # the model reads the windows (window_ids, window_type_ids)
        merged = base_config(
            task.model_step, list(task.inputs), outputs, parts.options, backend="python", params=params
        )
        steps = [merged, post]
        return [*steps, parts.ensemble(steps, self.name)]

    def homes(self, task: TaskSpec, tokenizer: str):
        return {"tokenizer": task.model_step, "model": task.model_step, "labels": task.postprocess_step}

    def python_steps(self, task: TaskSpec, tokenizer: str, runtime: str):
        return {task.model_step: "tokenizer_onnx", task.postprocess_step: task.postprocess}

    def versioned(self, task: TaskSpec):
        return (task.model_step, task.postprocess_step)

    def stages(self, task: TaskSpec, tokenizer: str):
        return [task.model_step, task.postprocess_step]
