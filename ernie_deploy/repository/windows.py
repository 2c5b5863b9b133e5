"""The model file a windowed token model serves on Triton's ONNX Runtime backend.

The ensemble hands the model step each text's windows, [batch, windows, tokens]. A python model step flattens them
itself (ernie_deploy.serving.model_steps.OnnxStep); the ORT backend runs the file as it is, so `build` wraps the
converted model: Flatten to [batch * windows, tokens] in front, and Reshape of the logits back to [batch, windows,
tokens, labels] behind. The converted graph in between is unchanged (tests/test_long_text.py runs both with
onnxruntime).
"""

from __future__ import annotations

from pathlib import Path

from ernie_deploy.core.errors import BadCheckpointError
from ernie_deploy.core.files import atomic_path
from ernie_deploy.core.tasks import LOGITS, MODEL_INPUTS, WINDOW_INPUTS, TensorSpec


def window_model(onnx_path: str | Path, out_path: str | Path) -> Path:
    """Write `onnx_path` wrapped to take window_ids / window_type_ids [batch, windows, tokens] and return logits
    [batch, windows, tokens, labels], atomically, to `out_path`."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load(str(onnx_path))
    graph = model.graph
    inputs = {i.name: i for i in graph.input}
    outputs = {o.name: o for o in graph.output}
    if sorted(inputs) != sorted(MODEL_INPUTS) or LOGITS not in outputs:
        raise BadCheckpointError(
            f"{onnx_path} has inputs {sorted(inputs)} and outputs {sorted(outputs)}; a windowed model wraps "
            f"{list(MODEL_INPUTS)} -> {LOGITS!r}",
            "convert the model with `ernie-deploy convert`, which names the tensors",
        )
    flat_logits = f"{LOGITS}_flat"
    for node in graph.node:  # the converted graph now writes the flat logits
        node.output[:] = [flat_logits if name == LOGITS else name for name in node.output]
    labels = outputs[LOGITS].type.tensor_type.shape.dim[-1]
    new_inputs, nodes = [], []
    for window, flat in zip(WINDOW_INPUTS, MODEL_INPUTS):
        new_inputs.append(
            helper.make_tensor_value_info(
                window, inputs[flat].type.tensor_type.elem_type, ["batch", "windows", "tokens"]
            )
        )
        nodes.append(helper.make_node("Flatten", [window], [flat], axis=2, name=f"flatten_{window}"))
    # logits [batch * windows, tokens, labels] -> [batch, windows, tokens, labels]: window_ids' shape, then labels.
    nodes += [
        helper.make_node("Shape", [WINDOW_INPUTS[0]], ["window_shape"], name="window_shape"),
        helper.make_node(
            "Constant", [], ["labels_dim"], value=helper.make_tensor("labels_dim", TensorProto.INT64, [1], [-1])
        ),
        helper.make_node("Concat", ["window_shape", "labels_dim"], ["logits_shape"], axis=0, name="logits_shape"),
        helper.make_node("Reshape", [flat_logits, "logits_shape"], [LOGITS], name="unflatten_logits"),
    ]
    converted = list(graph.node)
    del graph.node[:]
    graph.node.extend([*nodes[:2], *converted, *nodes[2:]])
    del graph.input[:]
    graph.input.extend(new_inputs)
    logits_type = outputs[LOGITS].type.tensor_type.elem_type
    del graph.output[:]
    label_dim = labels.dim_value if labels.HasField("dim_value") else "labels"
    graph.output.append(helper.make_tensor_value_info(LOGITS, logits_type, ["batch", "windows", "tokens", label_dim]))
    onnx.checker.check_model(model)
    out = Path(out_path)
    with atomic_path(out, suffix=".onnx") as tmp:
        onnx.save(model, str(tmp))
    return out


def windowed_signature(inputs: list, outputs: list) -> tuple[list, list]:
    """The converted model's tensors (MODEL_INPUTS -> LOGITS) as the windowed model step takes and returns them:
    window_ids / window_type_ids with a windows dim, and logits with one. What `window_model` writes, and what a
    python model step feeds the unwrapped file window by window."""

    by_name = {s.name: s for s in inputs}
    windowed = [
        TensorSpec(window, by_name[flat].data_type, (-1, *by_name[flat].dims))
        for window, flat in zip(WINDOW_INPUTS, MODEL_INPUTS)
    ]
    return windowed, [TensorSpec(o.name, o.data_type, (-1, *o.dims)) for o in outputs]
