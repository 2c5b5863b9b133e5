"""Tokenizer, model and postprocess in one python model: the ensemble's three steps chained in one process."""

from __future__ import annotations

from pathlib import Path

from ernie_deploy.core.io import NATIVE, wire
from ernie_deploy.core.tasks import MODEL_INPUTS, TEXT_INPUT, TOKENIZER_OUTPUTS, WINDOW_INPUTS, WINDOW_OUTPUTS
from ernie_deploy.serving.model_steps import OnnxStep
from ernie_deploy.serving.parameters import IO, LONG_TEXT, POSTPROCESS_STEP, TASK
from ernie_deploy.serving.postprocess_steps import POSTPROCESS_STEPS
from ernie_deploy.serving.step import Step
from ernie_deploy.serving.tokenizer_steps import TokenizerStep

_WINDOW_OUTPUTS = frozenset(WINDOW_OUTPUTS)


class PipelineStep(Step):
    """Tokenizer, model and postprocess in one python model: text -> the task's outputs, the same tensors
    as the ensemble. It saves the ensemble's two hops between processes per request (measured in
    docs/BENCHMARKS.md); it needs onnxruntime inside the python backend, so it is a pip-only layout."""

    def __init__(self, config: dict, version_dir: Path):
        # Its own inputs and outputs carry the names of the model's wire (core.io); its steps work under the task's.
        io = IO.read(config)
        if io == NATIVE:
            self.wire_inputs = {i["name"]: i["name"] for i in config.get("input") or [{"name": TEXT_INPUT.name}]}
            answered = {}
        else:
            wired = wire(TASK.read(config), io)
            self.wire_inputs, answered = wired.inputs, {w: name for name, w in wired.outputs.items()}
        native_inputs = [{"name": name} for name in self.wire_inputs]
        self.tokenizer = TokenizerStep({**config, "input": native_inputs, "output": []}, version_dir)
        self.model = OnnxStep({**config, "output": []}, version_dir)  # answers logits
        # one of POSTPROCESS_STEPS: the schema's choices are every kind's postprocess key, as that table's are
        self.post = POSTPROCESS_STEPS[POSTPROCESS_STEP.read(config)](config, version_dir)
        # Each output it answers: the task's own tensor of that meaning.
        self.outputs = {o["name"]: answered.get(o["name"], o["name"]) for o in config.get("output", [])}
        # The tensors the ensemble's steps would pass: the windows (build --long-text window) or the cut text.
        windowed = LONG_TEXT.read(config)
        self.inputs = WINDOW_INPUTS if windowed else MODEL_INPUTS
        self.tokens = set(_WINDOW_OUTPUTS) if windowed else {t.name for t in TOKENIZER_OUTPUTS} - _WINDOW_OUTPUTS

    def check(self, inputs):
        inputs = {name: inputs.get(w) for name, w in self.wire_inputs.items()}
        return self.tokenizer.check_request(inputs, set(self.inputs)), inputs

    def run(self, items, requested=None):
        tokens = self.tokenizer.run([texts for texts, _ in items], self.tokens)
        logits = self.model.run([tuple(t[name] for name in self.inputs) for t in tokens])
        # The postprocess sees what it would in the ensemble: the tokenizer's tensors, the logits and the request's
        # texts (its watch counts their lengths and how they were read).
        post_items = [self.post.check({**t, **out, **texts}) for t, out, (_, texts) in zip(tokens, logits, items)]
        # Only what some request of the batch names (an answer computed on request only, core.tasks.ON_REQUEST, is
        # left out of the rest); what the ensemble passes through from the tokenizer (e.g. `truncated`) comes from
        # `tokens`, and the raw logits from the model.
        answered = {n: own for n, own in self.outputs.items() if requested is None or n in requested}
        posts = self.post.run(post_items, set(answered.values()))
        results = []
        for t, out, post in zip(tokens, logits, posts):
            merged = {**t, **out, **post}  # once a request, not once an output
            results.append({name: merged[own] for name, own in answered.items()})
        return results

    def close(self) -> None:
        self.post.close()
