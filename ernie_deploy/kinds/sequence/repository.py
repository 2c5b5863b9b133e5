"""A label per text's postprocess as ONNX nodes (`build --graph-postprocess`): what SeqClsPostprocess computes
(ernie_deploy/kinds/sequence/serving.py) is softmax, argmax, max and a lookup of the label name, each an ONNX operator
that onnxruntime 1.32 runs (Softmax, ArgMax, ReduceMax at the converted model's opset, `ai.onnx.ml` LabelEncoder at
opset 2, int64 keys -> string values)."""

from __future__ import annotations

from ernie_deploy.core.tasks import LOGITS
from ernie_deploy.core.tasks import PROBABILITIES as ANSWERED

ML_DOMAIN = "ai.onnx.ml"
ML_OPSET = 2  # LabelEncoder with typed keys and values (keys_int64s, values_strings)
PROBABILITIES = ANSWERED.name  # the softmax, which the label comes from, is itself an output


def graph(logits, labels: list[str], opset: int):
    """logits [batch, classes] -> label_id INT64, label STRING, confidence FLOAT, each [batch, 1], probabilities FLOAT
    [batch, classes] and the logits themselves: what SeqClsPostprocess computes (softmax in float32; the first of
    equal maxima, as numpy's argmax picks) and the model's raw output; and the operator sets the nodes use besides the
    default domain, {domain: version}. The softmax is computed for the label anyway, so answering it costs the graph
    nothing; Triton copies out only the outputs a request names."""
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
    classes = len(labels)
    outputs = [
        helper.make_tensor_value_info("label_id", TensorProto.INT64, ["batch", 1]),
        helper.make_tensor_value_info("label", TensorProto.STRING, ["batch", 1]),
        helper.make_tensor_value_info("confidence", TensorProto.FLOAT, ["batch", 1]),
        helper.make_tensor_value_info(PROBABILITIES, TensorProto.FLOAT, ["batch", classes]),
        # The logits, as the converted model answers them (FP32: export.precision keeps every precision's output so):
        # the graph's input passed through, which the merged model computes once.
        helper.make_tensor_value_info(LOGITS, logits.type.tensor_type.elem_type, ["batch", classes]),
    ]

    return nodes, outputs, {ML_DOMAIN: ML_OPSET}
