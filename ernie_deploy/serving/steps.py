"""The serving steps that run inside Triton's python backend, by the name a model.py gives its `step`.

Each step is a plain testable class (serving.step): built from its model config and its version folder, it maps a
dict of numpy arrays (one request) to a dict of numpy arrays. Only numpy, tokenizers and onnxruntime are imported
by them: paddle is for export, not serving.
"""

from __future__ import annotations

from ernie_deploy.serving.model_steps import OnnxStep
from ernie_deploy.serving.pipeline import PipelineStep
from ernie_deploy.serving.postprocess_steps import POSTPROCESS_STEPS
from ernie_deploy.serving.tokenizer_steps import TokenizerOnnxStep, TokenizerStep

# What a model.py names as its `step` (written by `ernie-deploy build`); a TaskSpec's `postprocess` is one of
# these keys. The keys are part of every built repository: renaming one breaks repositories already built.
STEPS = {
    "tokenizer": TokenizerStep,
    "onnx": OnnxStep,
    **POSTPROCESS_STEPS,
    "pipeline": PipelineStep,
    "tokenizer_onnx": TokenizerOnnxStep,
}
