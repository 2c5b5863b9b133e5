"""The tokenizer inside the python model step (text -> logits in one process), the postprocess a step of its own:
one hop fewer than the ensemble, one more than the fused layout."""

from __future__ import annotations

from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.repository.configs import base_config
from ernie_deploy.repository.layouts.base import Layout, Parts
from ernie_deploy.repository.signature import spec_of
from ernie_deploy.serving.parameters import TOKENIZER_MODEL


class TokenizerInModel(Layout):
    name = "tokenizer-in-model"
    summary = "tokenizer and model in one python step -> postprocess (python runtime only)"
    runtimes = ("python",)
    shares_tokenizer = False

    def configs(self, parts: Parts):
        tokenizer, step, post = parts.tokenizer(), parts.model_step(), parts.postprocess()
        model = parts.model
        # It takes the ensemble's inputs and returns the logits and whatever tokenizer outputs the postprocess or the
        # caller reads (offsets, lengths, truncated; the windows' positions), so the postprocess step stays as it is.
        read = {t.name for t in post.input} | set(model.wire.outputs)
        outputs = [spec_of(o) for o in step.output] + [spec_of(o) for o in tokenizer.output if o.name in read]
        params = parts.own_parameters(tokenizer, step)
        if model.long_text == "window":
            # the model reads the windows (window_ids, window_type_ids), as its planned record says
            params |= TOKENIZER_MODEL.parameters(long_text=True)
        merged = base_config(
            model.model_step, list(model.task_spec.inputs), outputs, model.serving, backend="python", params=params
        )
        steps = [merged, post]
        return [*steps, parts.ensemble(steps, self.name)]

    def homes(self, model: ModelSpec, tokenizer: str):
        return {"tokenizer": model.model_step, "model": model.model_step, "labels": model.postprocess_step}

    def python_steps(self, model: ModelSpec, tokenizer: str, runtime: str):
        return {model.model_step: "tokenizer_onnx", model.postprocess_step: model.task_spec.postprocess}

    def versioned(self, model: ModelSpec):
        return (model.model_step, model.postprocess_step)

    def stages(self, model: ModelSpec, tokenizer: str):
        return [model.model_step, model.postprocess_step]
