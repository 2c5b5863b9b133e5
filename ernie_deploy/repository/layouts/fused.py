"""One python model per served model (tokenizer, onnxruntime and postprocess in one process) under the model's own
name: the same tensors for clients, no hops. Its versions are version folders of that one model."""

from __future__ import annotations

from ernie_deploy.core.errors import BadOptionsError
from ernie_deploy.core.settings import ServingSettings
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.repository.configs import base_config, extraction_config
from ernie_deploy.repository.layouts.base import LAYOUT_PARAMETER, Layout, Parts
from ernie_deploy.repository.signature import spec_of
from ernie_deploy.serving.parameters import PIPELINE


class Fused(Layout):
    name = "fused"
    summary = "tokenizer, model and postprocess in one python model (python runtime only)"
    runtimes = ("python",)
    shares_tokenizer = False
    runs_stages = True

    def check_serving_settings(self, options: ServingSettings) -> None:
        super().check_serving_settings(options)
        if options.response_cache:
            # Measured on Triton 2.51: a python model's refused request (an empty text) went into the response cache
            # as an answer with no outputs, and the same request asked again came back "successful" and empty. An
            # ensemble caches only the answers its steps gave, so the other layouts cache correctly.
            raise BadOptionsError(
                f"--cache with --layout {self.name}: Triton would cache a refused request as an empty answer and give "
                "it back as a success the next time",
                "build with --cache in another layout (ensemble, graph-postprocess, tokenizer-in-model), or drop "
                "--cache",
            )

    def configs(self, parts: Parts):
        if parts.model.kind_facts.staged:
            config = extraction_config(parts.model, parts.pad_token_id)
            config.parameters[LAYOUT_PARAMETER].string_value = self.name
            return [config]
        steps = [parts.tokenizer(), parts.model_step(), parts.postprocess()]
        ensemble = parts.ensemble(steps, self.name)  # the interface it answers with
        params = parts.own_parameters(*steps)
        params |= PIPELINE.parameters(postprocess=parts.model.task_spec.postprocess, task=parts.model.task_spec)
        params[LAYOUT_PARAMETER] = self.name
        outputs = [spec_of(o) for o in ensemble.output]
        model = parts.model
        return [
            base_config(
                model.name,
                model.wire.input_specs(),
                outputs,
                model.serving,
                backend="python",
                params=params,
            )
        ]

    def homes(self, model: ModelSpec, tokenizer: str):
        return dict.fromkeys(("tokenizer", "model", "labels"), model.name)

    def python_steps(self, model: ModelSpec, tokenizer: str, runtime: str):
        # A staged kind's one step is its whole extraction (its `postprocess` key: kinds/<kind>/serving.py).
        return {model.name: model.task_spec.postprocess if model.kind_facts.staged else "pipeline"}

    def versioned(self, model: ModelSpec):
        return (model.name,)

    def stages(self, model: ModelSpec, tokenizer: str):
        return [model.name]
