"""The serving steps that run inside Triton's python backend, by the name a model.py gives its `step`.

Each step is a plain testable class (serving.step): built from its model config and its version folder, it maps a
dict of numpy arrays (one request) to a dict of numpy arrays. Only numpy, tokenizers and onnxruntime are imported
by them: paddle is for export, not serving.
"""

from __future__ import annotations

from pathlib import Path

from ernie_deploy.serving.model_steps import OnnxStep
from ernie_deploy.serving.parameters import WATCHED_MODEL
from ernie_deploy.serving.pipeline import PipelineStep
from ernie_deploy.serving.postprocess_steps import POSTPROCESS_STEPS, WATCHES
from ernie_deploy.serving.step import Step
from ernie_deploy.serving.tokenizer_steps import TokenizerOnnxStep, TokenizerStep
from ernie_deploy.serving.watch import Watched, watched_task


def _model_step(config: dict, version_dir) -> Step:
    """The model step; watched where it answers (`--graph-postprocess`: the graph computes the answers, and `build`
    names the model to watch on this step's config)."""
    step = OnnxStep(config, version_dir)
    if WATCHED_MODEL.read(config) is None:
        return step
    kind = watched_task(config).kind
    return Watched(step, config, Path(version_dir), WATCHES[kind], texts=False)


# What a model.py names as its `step` (written by `ernie-deploy build`); a TaskSpec's `postprocess` is one of
# these keys. The keys are part of every built repository: renaming one breaks repositories already built.
STEPS = {
    "tokenizer": TokenizerStep,
    "onnx": _model_step,
    **POSTPROCESS_STEPS,
    "pipeline": PipelineStep,
    "tokenizer_onnx": TokenizerOnnxStep,
}
