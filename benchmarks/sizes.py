"""The benchmark's models of real ERNIE 3.0 sizes: a task's demo model remade in each shape (random weights, the
demo model's vocabulary and labels, fetch.shapes), exported and converted under the parity gate as a user's model
would be, and benched beside the demo model on the same test texts.

Each size is a named model, `<demo model>_<size>` (ernie_seqcls_nano, ...), with its files cached under
artifacts/sizes/<name>/ and remade only when the shape, the demo vocabulary or its labels change.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from ernie_deploy.core.files import write_json
from ernie_deploy.core.paths import artifacts_dir
from ernie_deploy.evaluate.inputs import ModelInputs
from ernie_deploy.export.gates import Gates
from ernie_deploy.export.onnx import convert_checked
from ernie_deploy.export.static import StaticModel, export
from ernie_deploy.fetch.checkpoints import inspect_checkpoint
from ernie_deploy.fetch.shapes import checkpoint_facts, get_shape, make_checkpoint

PARITY_TEXTS = 32  # texts the conversion of each size is gated on


@dataclass
class SizedInputs(ModelInputs):
    """A model remade in a real shape for the size rows, with its shape's facts: its size, parameters, layers and
    hidden size. Such a model gets the rows that say what a size costs (in-process limits, served, ensemble), not
    the others."""

    shape: dict | None = None


def shape_of(item: ModelInputs) -> dict | None:
    """The shape's facts of a sized model; None for any other model."""
    return item.shape if isinstance(item, SizedInputs) else None


def sizes_dir() -> Path:
    return artifacts_dir() / "sizes"


def sized_name(base: ModelInputs, size: str) -> str:
    return f"{base.name}_{size}"


def prepare_size(base: ModelInputs, size: str, root: Path | None = None, log=print) -> SizedInputs:
    """`base`'s model remade in the shape `size`: checkpoint, static model and ONNX (parity-gated), reused when
    already made from the same inputs, with the shape's facts (`shape`)."""

    shape = get_shape(size)
    name = sized_name(base, size)
    folder = (root or sizes_dir()) / name
    vocab = Path(base.static.vocab_file).read_text(encoding="utf-8").splitlines()
    checkpoint = make_checkpoint(shape, base.static.task, base.static.labels, vocab, folder / "checkpoint")
    facts = checkpoint_facts(checkpoint)
    made = folder / "made.json"
    static_dir, onnx = folder / "static", folder / "onnx" / "model.onnx"
    if not (made.exists() and json.loads(made.read_text()).get("key") == facts["key"] and onnx.exists()):
        log(f"{name}: exporting and converting the {size} shape ({facts['params'] / 1e6:.1f} M parameters)")
        static = export(inspect_checkpoint(checkpoint), base.static.task, static_dir, base.static.labels)
        convert_checked(
            static,
            onnx,
            gates=Gates(tuple(base.texts[:PARITY_TEXTS])),
            log=lambda line: log(f"{name}: {line}"),
        )
        write_json({"key": facts["key"]}, made)
    shape_facts = {
        "size": size,
        "params": facts["params"],
        "layers": facts["num_hidden_layers"],
        "hidden": facts["hidden_size"],
    }
    static = StaticModel.load(static_dir)
    return SizedInputs(replace(static.spec, name=name), onnx, static, base.texts, shape=shape_facts)


def prepare_sizes(inputs: list[ModelInputs], sizes: tuple[str, ...], root: Path | None = None, log=print) -> list:
    """The sized models of the first demo model in `inputs` (sizes are timed on one task: the classifier, by
    default), in the order given."""
    if not sizes or not inputs:
        return []
    base = inputs[0]
    return [prepare_size(base, size, root, log) for size in sizes]
