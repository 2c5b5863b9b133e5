"""Answers in the model's wire (core.io, `build --io`): the python step that answers the caller writes the outputs
its wire formats otherwise (the `paddlenlp_formats` of kinds/<kind>/serving.py), under the task's own names; the entry
renames them (the ensemble's maps, or the fused model's own names: serving.pipeline)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.io import PADDLENLP
from ernie_deploy.serving.parameters import IO
from ernie_deploy.serving.step import Step


class WireAnswers(Step):
    """`step`, with each answered output in `formats` written element by element in the wire's format."""

    def __init__(self, step: Step, formats: dict[str, Callable[[bytes], bytes]]):
        self.step, self.formats = step, formats

    def check_request(self, inputs, wanted):
        return self.step.check_request(inputs, wanted)

    def check(self, inputs):
        return self.step.check(inputs)

    def close(self) -> None:
        self.step.close()

    def run(self, items, requested=None):
        results = self.step.run(items, requested)
        return [r if isinstance(r, ErnieDeployError) else self._format(r) for r in results]

    def _format(self, outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = dict(outputs)
        for name, write in self.formats.items():
            if name in out:
                column = out[name]
                written = [write(bytes(item)) for item in column.reshape(-1)]
                out[name] = np.array(written, dtype=np.object_).reshape(column.shape)
        return out


def in_wire(step_class, formats: dict[str, Callable[[bytes], bytes]]):
    """A factory of `step_class` (config, version_dir) that answers in the wire its config names: as it is for
    ernie-deploy's own, wrapped in WireAnswers for PaddleNLP's."""

    def make(config: dict, version_dir) -> Step:
        step = step_class(config, version_dir)
        return WireAnswers(step, formats) if IO.read(config) == PADDLENLP and formats else step

    make.__name__ = step_class.__name__
    return make
