"""A served model's wire: the names and shapes its clients send and read (`build --io`).

Every model computes the same answers; its wire says how they are named and written on the way out, so that clients
written for another server run unchanged:
- `ernie-deploy` (the default): the task's own tensors (core.tasks: `text` in; `label`, `confidence`, `entities`...).
- `paddlenlp`: the tensors of PaddleNLP's ERNIE 3.0 Triton pipeline (`INPUT` in; `label` as the class id and
  `confidence` for a label per text, `OUTPUT` holding a list of {"pos": [start, end], "label"} with `end` inclusive
  for entities, as JSON: the Python literal that pipeline's clients read). What each kind answers under it is the
  kind's (Kind.paddlenlp_outputs); a kind that pipeline never served (a set of labels per text) has no PaddleNLP wire
  and is refused by name.

The wire is a fact of the model (ModelSpec.io), recorded by `build`; the repository, the serving steps and the client
all read it from here.
"""

from __future__ import annotations

from dataclasses import dataclass

from ernie_deploy.core.errors import BadOptionsError
from ernie_deploy.core.tasks import ON_REQUEST, TaskSpec, TensorSpec

NATIVE = "ernie-deploy"
PADDLENLP = "paddlenlp"
IOS = (NATIVE, PADDLENLP)
# The config parameter of a python step that answers in another wire than the native one (serving.wire).
IO_PARAMETER = "io"
# PaddleNLP's input names: its pipeline took one text as INPUT; a pair model's second text is INPUT_PAIR (that
# pipeline had no pair models: the name is this project's choice, beside the first).
PADDLENLP_INPUTS = {"text": "INPUT", "text_pair": "INPUT_PAIR"}


@dataclass(frozen=True)
class Wire:
    """How one model's tensors are named on the wire. `inputs` and `outputs` map the task's own tensor names (the
    names every step computes under) to the names clients send and read; `outputs` holds only what is answered."""

    name: str
    task: TaskSpec
    inputs: dict[str, str]
    outputs: dict[str, str]

    @property
    def native(self) -> bool:
        return self.name == NATIVE

    def input_specs(self) -> list[TensorSpec]:
        """The tensors a client sends, in the task's input order: its texts, then what it may send beside them."""
        return [
            TensorSpec(self.inputs[t.name], t.data_type, t.dims, t.optional)
            for t in (*self.task.inputs, *self.task.options)
        ]

    def output_specs(self) -> list[TensorSpec]:
        """The tensors a client reads: each the task's tensor of that meaning, renamed (types and dims kept)."""
        own = {t.name: t for t in self.task.outputs}
        return [TensorSpec(wire, own[name].data_type, own[name].dims) for name, wire in self.outputs.items()]

    def read_specs(self, asked=()) -> list[TensorSpec]:
        """The tensors a client names in its request: every answer but those computed on request only
        (core.tasks.ON_REQUEST), and of those the ones in `asked` (the task's own names)."""
        wired = {w: name for name, w in self.outputs.items()}
        return [t for t in self.output_specs() if wired[t.name] not in ON_REQUEST or wired[t.name] in asked]

    @property
    def reformatted(self) -> tuple[str, ...]:
        """The task's outputs whose contents this wire writes otherwise (not only under another name): the python
        step that answers them formats them (serving.wire), the client reads them back (client.wire)."""
        if self.native:
            return ()
        return tuple(name for name in self.outputs if name in self.task.kind_facts.paddlenlp_formats)


def check_io(io: str) -> str:
    if io not in IOS:
        raise BadOptionsError(f"unknown --io {io!r}", f"use one of: {', '.join(IOS)}")
    return io


def wire(task: TaskSpec, io: str | None = None, model: str = "") -> Wire:
    """The wire of a `task` model answering in `io` (None: the native one); a refusal naming the model where its
    kind has no such wire."""
    io = check_io(io or NATIVE)
    if io == NATIVE:
        inputs = {t.name: t.name for t in (*task.inputs, *task.options)}
        return Wire(NATIVE, task, inputs, {t.name: t.name for t in task.outputs})
    outputs = task.kind_facts.paddlenlp_outputs
    if not outputs:
        raise BadOptionsError(
            f"--io {io}: PaddleNLP's Triton pipeline has no tensors for {task.kind} model "
            f"{model or task.name!r} ({task.name}), so no PaddleNLP client reads its answers",
            "build it with the default --io ernie-deploy (its HTTP clients can use `ernie-deploy gateway`'s Hugging "
            "Face route), and --io paddlenlp for its classifier and token models",
        )
    return Wire(io, task, {t.name: PADDLENLP_INPUTS[t.name] for t in task.inputs}, {n: w for w, n in outputs})
