"""Run an exported ERNIE ONNX model with onnxruntime (serving path: numpy + onnxruntime only)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ernie_deploy.core.errors import BadCheckpointError, BadOptionsError
from ernie_deploy.core.tasks import LOGITS, MODEL_INPUTS

# How onnxruntime's intra-op threads wait for work: never busy ("off"), busy inside a run only ("run"), or busy
# between runs too ("always", onnxruntime's own default).
SPIN_MODES = ("off", "run", "always")


class OnnxModel:
    """An onnxruntime session over `model.onnx` whose signature is checked against what the pipeline feeds."""

    def __init__(
        self,
        path: str | Path,
        *,
        intra_op_threads: int | None = None,
        spinning: str = "always",
        outputs: tuple[str, ...] = (LOGITS,),
    ):
        """outputs: what `run` returns (a model built with --graph-postprocess answers labels, not logits).
        spinning: how onnxruntime's worker threads wait for work (SPIN_MODES). "always" (onnxruntime's default):
        they busy-wait, between runs too; best alone in a process that owns the cores. "off": they sleep, which
        leaves the cores to the tokenizer and postprocess processes of a server but wakes them late at every
        parallel section of a run. "run": they busy-wait inside a run and stop at its end: a lone request runs
        nearly as fast as with "always", and idle threads take no CPU (docs/BENCHMARKS.md, Levers)."""
        import onnxruntime as ort

        path = Path(path)
        if not path.exists():
            raise BadCheckpointError(f"no ONNX model at {path}", "run `ernie-deploy convert` and `ernie-deploy build`")
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        threads = intra_op_threads or int(os.environ.get("ERNIE_DEPLOY_ORT_THREADS", "0"))
        if threads:
            options.intra_op_num_threads = threads
        if spinning not in SPIN_MODES:
            raise BadOptionsError(
                f"unknown onnxruntime spinning mode {spinning!r}", f"use one of {', '.join(SPIN_MODES)}"
            )
        if spinning == "off":
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        elif spinning == "run":
            options.add_session_config_entry("session.force_spinning_stop", "1")
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        inputs = [i.name for i in self.session.get_inputs()]
        found = [o.name for o in self.session.get_outputs()]
        self.outputs = list(outputs)
        if sorted(inputs) != sorted(MODEL_INPUTS) or set(self.outputs) - set(found):
            raise BadCheckpointError(
                f"{path} has inputs {inputs} and outputs {found}; "
                f"expected inputs {list(MODEL_INPUTS)} and outputs {self.outputs}",
                "convert the model with `ernie-deploy convert`, which names the tensors",
            )

    def __call__(self, input_ids: np.ndarray, token_type_ids: np.ndarray) -> np.ndarray:
        """The first output (the logits, for a converted model)."""
        return self.run(input_ids, token_type_ids)[0]

    def run(self, input_ids: np.ndarray, token_type_ids: np.ndarray) -> list[np.ndarray]:
        feeds = {"input_ids": np.asarray(input_ids, np.int64), "token_type_ids": np.asarray(token_type_ids, np.int64)}
        return self.session.run(self.outputs, feeds)
