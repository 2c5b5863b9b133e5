"""A classifier's postprocess as ONNX nodes appended to the converted graph (`build --graph-postprocess`).

The python postprocess of a sequence classifier (ernie_deploy.serving.postprocess_steps.SeqClsPostprocess) is softmax, argmax,
max and a lookup of the label name. Each is an ONNX operator that onnxruntime 1.32 runs (Softmax, ArgMax, ReduceMax
at the converted model's opset, `ai.onnx.ml` LabelEncoder at opset 2, int64 keys -> string values), so the model
step can answer `label_id`, `label` and `confidence` itself and the ensemble loses a python hop: tokenizer -> model.

The appended nodes are built as a small graph of their own (logits in, the task's outputs out), so that `build` can
read its signature for the Triton config without loading the weights, and joined to the converted model with
`onnx.compose.merge_models` when the model file is written. The converted graph is not changed.
"""

from __future__ import annotations

from pathlib import Path

from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.tasks import LOGITS, TaskSpec

ML_DOMAIN = "ai.onnx.ml"
ML_OPSET = 2  # LabelEncoder with typed keys and values (keys_int64s, values_strings)
PROBABILITIES = "postprocess_probabilities"


def _softmax_argmax_label(logits, labels: list[str], opset: int):
    """logits [batch, classes] -> label_id INT64, label STRING, confidence FLOAT, each [batch, 1]: what
    SeqClsPostprocess computes (softmax in float32; the first of equal maxima, as numpy's argmax picks)."""
    from onnx import TensorProto, helper

    nodes, source = [], LOGITS
    if logits.type.tensor_type.elem_type != TensorProto.FLOAT:  # the python step computes in float32 too
        nodes.append(helper.make_node("Cast", [LOGITS], ["postprocess_logits_fp32"], to=TensorProto.FLOAT))
        source = "postprocess_logits_fp32"
    nodes.append(helper.make_node("Softmax", [source], [PROBABILITIES], axis=-1, name="postprocess_softmax"))
    nodes.append(
        helper.make_node("ArgMax", [PROBABILITIES], ["label_id"], axis=-1, keepdims=1, name="postprocess_argmax")
    )
    if opset >= 18:  # ReduceMax takes its axes as an input from opset 18 on
        axes = helper.make_tensor("postprocess_axes", TensorProto.INT64, [1], [-1])
        nodes.append(helper.make_node("Constant", [], ["postprocess_axes"], value=axes))
        nodes.append(
            helper.make_node(
                "ReduceMax", [PROBABILITIES, "postprocess_axes"], ["confidence"], keepdims=1, name="postprocess_max"
            )
        )
    else:
        nodes.append(
            helper.make_node(
                "ReduceMax", [PROBABILITIES], ["confidence"], axes=[-1], keepdims=1, name="postprocess_max"
            )
        )
    nodes.append(
        helper.make_node(
            "LabelEncoder",
            ["label_id"],
            ["label"],
            domain=ML_DOMAIN,
            keys_int64s=list(range(len(labels))),
            values_strings=list(labels),
            default_string="",
            name="postprocess_label",
        )
    )
    outputs = [
        helper.make_tensor_value_info("label_id", TensorProto.INT64, ["batch", 1]),
        helper.make_tensor_value_info("label", TensorProto.STRING, ["batch", 1]),
        helper.make_tensor_value_info("confidence", TensorProto.FLOAT, ["batch", 1]),
    ]
    return nodes, outputs


# TaskSpec.graph_postprocess -> the function that builds its nodes and outputs.
GRAPHS = {"softmax_argmax_label": _softmax_argmax_label}


def _converted_facts(onnx_path: str | Path):
    """The converted model's logits output, IR version and default-domain opset (weights not loaded)."""
    import onnx

    model = onnx.load(str(onnx_path), load_external_data=False)
    outputs = {o.name: o for o in model.graph.output}
    if LOGITS not in outputs:
        raise ErnieDeployError(
            f"{onnx_path} has outputs {sorted(outputs)}; the postprocess graph reads {LOGITS!r}",
            "convert the model with `ernie-deploy convert`, which names the tensors",
        )
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    return outputs[LOGITS], model.ir_version, opset


def postprocess_graph(task: TaskSpec, onnx_path: str | Path, labels: list[str]):
    """The ModelProto of `task`'s postprocess alone: `logits` in, the task's outputs out, at the converted model's
    IR version and opset (merge_models joins only models that agree on both)."""
    import onnx
    from onnx import helper

    if not task.graph_postprocess:
        raise ErnieDeployError(
            f"{task.name} model {task.ensemble!r} has no postprocess that an ONNX graph expresses",
            "build it without --graph-postprocess (build models of other kinds separately, with --task or --name)",
        )
    logits, ir_version, opset = _converted_facts(onnx_path)
    classes = logits.type.tensor_type.shape.dim[-1]
    if classes.HasField("dim_value") and classes.dim_value != len(labels):
        raise ErnieDeployError(
            f"{onnx_path} has {classes.dim_value} classes but the model's labels name {len(labels)}",
            "export the model again so its labels come from the same checkpoint",
        )
    nodes, outputs = GRAPHS[task.graph_postprocess](logits, labels, opset)
    graph = helper.make_graph(nodes, f"{task.ensemble}_postprocess", [logits], outputs)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(ML_DOMAIN, ML_OPSET)]
    )
    model.ir_version = ir_version
    onnx.checker.check_model(model)
    return model


def write_with_postprocess(task: TaskSpec, onnx_path: str | Path, labels: list[str], out_path: str | Path) -> Path:
    """Write the converted model with `task`'s postprocess appended, atomically, to `out_path`: same inputs, the
    task's outputs instead of the logits."""
    import onnx
    from onnx import compose

    from ernie_deploy.core.files import atomic_path

    post = postprocess_graph(task, onnx_path, labels)
    converted = onnx.load(str(onnx_path))
    if not any(o.domain == ML_DOMAIN for o in converted.opset_import):
        converted.opset_import.append(onnx.helper.make_opsetid(ML_DOMAIN, ML_OPSET))
    merged = compose.merge_models(converted, post, io_map=[(LOGITS, LOGITS)])
    onnx.checker.check_model(merged)
    out = Path(out_path)
    with atomic_path(out, suffix=".onnx") as tmp:
        onnx.save(merged, str(tmp))
    return out
