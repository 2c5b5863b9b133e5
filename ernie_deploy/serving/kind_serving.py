"""What the serving layer reads of a kind: the object each kinds/<kind>/serving.py defines (SERVING), listed by
serving.postprocess_steps. Core, kinds and serving modules only: it runs inside Triton's python backend."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ernie_deploy.serving.step import Step
from ernie_deploy.serving.watch import KindWatch


@dataclass(frozen=True)
class KindServing:
    # Its postprocess step, served under the kind's `postprocess` key (serving.steps.STEPS).
    postprocess: type[Step]
    # Its part of the watch (serving.watch): what its answer is, which series it feeds, when two answers agree.
    watch: KindWatch
    # The task's outputs PaddleNLP's wire writes in another format (the kind's `paddlenlp_formats`), each element
    # rewritten by its function (serving.wire).
    paddlenlp_formats: dict[str, Callable[[bytes], bytes]] = field(default_factory=dict)
