"""A version's configs rendered from its record (`<model>/<V>/model.json`): what `build` renders of that record
(repository.layouts.task_configs), so that moving a model between versions (rollout, rollback, the canary, a shadow)
writes the configs `build` would have written for the version, its serving settings included.

`build` reads the converted model's tensors from the converted file; a repository holds the file as the version serves
it, which for two layouts is not the converted one: `graph-postprocess` appends the postprocess to the graph
(repository/postprocess_graph.py) and a windowed model on the ORT backend is wrapped to take windows
(repository/windows.py). Its tensors are read back from the served file, as the converted file had them, into a model
file of tensors alone, which the layouts read as they read the converted one.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from ernie_deploy.core.errors import BadRepositoryError
from ernie_deploy.core.spec import SPEC_PARAMETER, ModelSpec
from ernie_deploy.core.tasks import MODEL_INPUTS, TOKENIZER_STEP, WINDOW_INPUTS
from ernie_deploy.repository.layouts import Layout, task_configs
from ernie_deploy.repository.served import FIRST_VERSION
from ernie_deploy.serving.tokenizer import PAD

# The version folder of a shared tokenizer step: its one version, the one `build` wrote it into.
SHARED_TOKENIZER_VERSION = FIRST_VERSION


def version_configs(
    repository: Path, layout: Layout, entry: mc.ModelConfig, record: ModelSpec, version: int
) -> dict[str, mc.ModelConfig]:
    """Triton model -> its config as `build` renders it from `record`, the record of `version` of the model whose
    entry is `entry` (the entry carrying the record, as `build` writes it). The tokenizer step's config is among them
    but a shared one is not the version's to write."""
    tokenizer = entry.ensemble_scheduling.step[0].model_name if layout.shares_tokenizer else TOKENIZER_STEP
    homes = layout.homes(record, tokenizer)
    served = repository / homes["model"] / str(version) / "model.onnx"
    vocabulary = repository / homes["tokenizer"] / _folder(layout, version) / "tokenizer.json"
    with tempfile.TemporaryDirectory(prefix="ernie-deploy-tensors-") as folder:
        tensors = converted_tensors(served, record, Path(folder) / "model.onnx")
        configs = {c.name: c for c in task_configs(record, tensors, tokenizer, pad_id(vocabulary))}
    configs[record.name].parameters[SPEC_PARAMETER].string_value = record.to_json()
    return configs


def _folder(layout: Layout, version: int) -> str:
    return SHARED_TOKENIZER_VERSION if layout.shares_tokenizer else str(version)


def pad_id(tokenizer_json: Path) -> int:
    """The id a served tokenizer pads with (its tokenizer.json's vocabulary), which `build` read from vocab.txt."""

    try:
        return json.loads(tokenizer_json.read_text(encoding="utf-8"))["model"]["vocab"][PAD]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BadRepositoryError(
            f"{tokenizer_json} is not the tokenizer `build` wrote ({type(exc).__name__}: {exc})",
            "rebuild the model: ernie-deploy build --model NAME",
        ) from None


def converted_tensors(served: Path, record: ModelSpec, out: Path) -> Path:
    """A model file holding only the tensors of the converted model `served` was written from (inputs, outputs, IR
    version and operator sets; no nodes, no weights): the inputs and outputs the pipeline reads of it, unwrapped from
    their windows where repository/windows.py wrapped them. Returns `out`."""
    import onnx
    from google.protobuf.message import DecodeError
    from onnx import helper

    try:
        model = onnx.load(str(served), load_external_data=False)
    except (OSError, DecodeError) as exc:
        raise BadRepositoryError(
            f"{served} cannot be read as an ONNX model ({type(exc).__name__}: {exc})",
            f"build the version again: ernie-deploy build --model {record.name} --version N",
        ) from None
    wrapped = record.serving.runtime == "onnxruntime" and record.long_text == "window"
    inputs = {t.name: t for t in model.graph.input}
    outputs = {t.name: t for t in model.graph.output}
    names = dict(zip(WINDOW_INPUTS, MODEL_INPUTS)) if wrapped else {n: n for n in MODEL_INPUTS}
    wanted = record.kind_facts.model_outputs
    missing = [n for n in names if n not in inputs] + [n for n in wanted if n not in outputs]
    if missing:
        raise BadRepositoryError(
            f"{served} has no tensor {', '.join(missing)}, which {record.name!r} serves",
            f"build the version again: ernie-deploy build --model {record.name} --version N",
        )
    tensors = [_unwrapped(inputs[n], flat, wrapped) for n, flat in names.items()]
    answers = [_unwrapped(outputs[n], n, wrapped) for n in wanted]
    proto = helper.make_model(helper.make_graph([], "tensors", tensors, answers), opset_imports=model.opset_import)
    proto.ir_version = model.ir_version
    onnx.save(proto, str(out))
    return out


def _unwrapped(tensor, name: str, wrapped: bool):
    """A copy of `tensor` under `name`; a wrapped one without its windows dim (the one after the batch)."""
    from onnx import ValueInfoProto

    copy = ValueInfoProto()
    copy.CopyFrom(tensor)
    copy.name = name
    if wrapped:
        del copy.type.tensor_type.shape.dim[1]
    return copy
