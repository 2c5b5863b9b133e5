"""A classifier's postprocess as ONNX nodes appended to the converted graph (`build --graph-postprocess`).

A kind whose python postprocess is graph operations (a label per text: softmax, argmax, max and a lookup of the label
name; ernie_deploy/kinds/<kind>/repository.py) has them appended as ONNX nodes, so that the model step answers
`label_id`, `label` and `confidence` itself and the ensemble loses a python hop: tokenizer -> model.

The appended nodes are built as a small graph of their own (logits in, the model's outputs out), so that `build` can
read its signature for the Triton config without loading the weights, and joined to the converted model with
`onnx.compose.merge_models` when the model file is written. The converted graph is not changed.
"""

from __future__ import annotations

from pathlib import Path

from ernie_deploy.core.errors import BadCheckpointError, BadOptionsError
from ernie_deploy.core.files import atomic_path
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.core.tasks import LOGITS
from ernie_deploy.kinds import KINDS, layer_table
from ernie_deploy.kinds.sequence.repository import graph as SEQUENCE

# The repository layer's table of the kinds that have a graph postprocess (Kind.graph_postprocess): the function that
# builds its nodes and outputs (the `graph` of kinds/<kind>/repository.py), by the kind's name. A kind is one import
# above and one line here.
KIND_GRAPHS = layer_table(
    "repository",
    __name__,
    {
        "sequence": SEQUENCE,
    },
    reads=lambda kind: bool(kind.graph_postprocess),
)
# The same functions by Kind.graph_postprocess, the name a task's record gives its graph.
GRAPHS = {KINDS[name].graph_postprocess: graph for name, graph in KIND_GRAPHS.items()}


def _converted_facts(onnx_path: str | Path):
    """The converted model's logits output, IR version and default-domain opset (weights not loaded)."""
    import onnx

    model = onnx.load(str(onnx_path), load_external_data=False)
    outputs = {o.name: o for o in model.graph.output}
    if LOGITS not in outputs:
        raise BadCheckpointError(
            f"{onnx_path} has outputs {sorted(outputs)}; the postprocess graph reads {LOGITS!r}",
            "convert the model with `ernie-deploy convert`, which names the tensors",
        )
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    return outputs[LOGITS], model.ir_version, opset


def postprocess_graph(model: ModelSpec, onnx_path: str | Path):
    """The ModelProto of `model`'s postprocess alone: `logits` in, the model's outputs out, at the converted model's
    IR version and opset (merge_models joins only models that agree on both)."""
    import onnx
    from onnx import helper

    labels = list(model.labels)

    if not model.task_spec.graph_postprocess:
        raise BadOptionsError(
            f"{model.task} model {model.name!r} has no postprocess that an ONNX graph expresses",
            "build it without --graph-postprocess (build models of other kinds separately, with --task or --model)",
        )
    logits, ir_version, opset = _converted_facts(onnx_path)
    classes = logits.type.tensor_type.shape.dim[-1]
    if classes.HasField("dim_value") and classes.dim_value != len(labels):
        raise BadCheckpointError(
            f"{onnx_path} has {classes.dim_value} classes but the model's labels name {len(labels)}",
            "export the model again so its labels come from the same checkpoint",
        )
    nodes, outputs, opsets = GRAPHS[model.task_spec.graph_postprocess](logits, labels, opset)
    graph = helper.make_graph(nodes, f"{model.name}_postprocess", [logits], outputs)
    proto = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", opset), *(helper.make_opsetid(d, v) for d, v in opsets.items())],
    )
    proto.ir_version = ir_version
    onnx.checker.check_model(proto)
    return proto


def write_with_postprocess(model: ModelSpec, onnx_path: str | Path, out_path: str | Path) -> Path:
    """Write the converted model with `model`'s postprocess appended, atomically, to `out_path`: same inputs, the
    model's outputs instead of the logits."""
    import onnx
    from onnx import compose

    post = postprocess_graph(model, onnx_path)
    converted = onnx.load(str(onnx_path))
    for extra in post.opset_import:  # the operator sets the appended nodes use, which the converted graph lacks
        if extra.domain not in ("", "ai.onnx") and not any(o.domain == extra.domain for o in converted.opset_import):
            converted.opset_import.append(onnx.helper.make_opsetid(extra.domain, extra.version))
    merged = compose.merge_models(converted, post, io_map=[(LOGITS, LOGITS)])
    onnx.checker.check_model(merged)
    out = Path(out_path)
    with atomic_path(out, suffix=".onnx") as tmp:
        onnx.save(merged, str(tmp))
    return out
