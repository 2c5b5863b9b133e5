"""onnxruntime's transformer optimizer on paddle2onnx ERNIE graphs, with the small rewrite that lets its attention
fusion match them (`convert --optimize`).

Run as exported, the optimizer fuses LayerNorm, SkipLayerNorm and BiasGelu but no attention block, for two reasons
read off its matcher (onnxruntime 1.32, `fusion_attention.py`):
  - paddle2onnx scales the query before the QK MatMul (Mul by 1/sqrt(head_dim), then Add 0 from Paddle's `scale`
    op); the matcher wants the scale between the QK MatMul and the mask Add, as a Div (it takes the first parent
    of each type, so a Mul there is taken for the mask's Mul);
  - Paddle builds the additive mask as Unsqueeze(Cast(Equal(input_ids, pad)) * -1e4 + 0); the matcher wants
    Mul(Sub(1, Cast(Unsqueeze(Unsqueeze(mask_2d)))), -1e4), where mask_2d is 1 on real tokens.
`prepare_for_fusion` rewrites both into those forms (the same values: Paddle's -1e4 on pad tokens, 0 elsewhere;
q.k / sqrt(d) instead of (q / sqrt(d)).k) and drops paddle2onnx's Identity nodes. The optimizer then fuses every
block into one `Attention` node fed by the 2D mask (kept 2D, not reduced to lengths, so a pad id anywhere is
masked as Paddle masks it). Inputs and output stay exactly as exported.
"""

from __future__ import annotations

import collections
import tempfile
from pathlib import Path

import numpy as np

from ernie_deploy.core.errors import BadCheckpointError
from ernie_deploy.core.files import atomic_path
from ernie_deploy.export.precision import _quiet_onnxruntime_tools, _require_same_signature, _smoke_run

FIX = "convert without --optimize and report this model"


def _scalar(initializers: dict, name: str) -> float | None:
    value = initializers.get(name)
    return None if value is None or value.size != 1 else float(value.reshape(()))


def _drop_identities(graph, outputs: set[str]) -> list:
    """The graph's nodes less its Identity nodes (one per Paddle op output; they hide the parents the matcher walks
    through), each input now read from where its Identity chain starts. graph.node is replaced at the end
    (_replace_nodes)."""
    alias, kept = {}, []
    for node in graph.node:
        if node.op_type == "Identity" and node.output[0] not in outputs:
            alias[node.output[0]] = node.input[0]
        else:
            kept.append(node)

    def resolve(name: str) -> str:
        while name in alias:
            name = alias[name]
        return name

    for node in kept:
        node.input[:] = [resolve(name) for name in node.input]
    return kept


def _parent(producer: dict, node, index: int, op_type: str):
    """The node that makes `node`'s input `index`, when it is an `op_type`, else None."""
    found = producer.get(node.input[index]) if index < len(node.input) else None
    return found if found is not None and found.op_type == op_type else None


def _rewrite_mask(graph, kept: list, initializers: dict, producer: dict) -> list[tuple[object, list]]:
    """Unsqueeze(Add(Mul(Cast(Equal(input_ids, pad)), value), 0), [1, 2]) -> the matcher's form; what read the old
    mask reads the new one. Returns (node to insert after, new nodes); raises unless there is exactly one such
    mask."""
    from onnx import TensorProto, helper, numpy_helper

    consumers = collections.defaultdict(list)
    for node in kept:
        for name in node.input:
            consumers[name].append(node)
    added: list[tuple[object, list]] = []
    for node in kept:
        add = _parent(producer, node, 0, "Add") if node.op_type == "Unsqueeze" else None
        mul = add and _parent(producer, add, 0, "Mul")
        cast = mul and _parent(producer, mul, 0, "Cast")
        equal = cast and _parent(producer, cast, 0, "Equal")
        if not equal or "input_ids" not in equal.input:
            continue
        value, offset = _scalar(initializers, mul.input[1]), _scalar(initializers, add.input[1])
        if value is None or value >= 0 or offset != 0:
            problem = f"the attention mask multiplies by {value} and adds {offset}; expected < 0 and 0"
            raise BadCheckpointError(problem, FIX)
        graph.initializer.extend(
            [
                numpy_helper.from_array(np.array([1], np.int64), "optimize.axis_1"),
                numpy_helper.from_array(np.array(1.0, np.float32), "optimize.one"),
                numpy_helper.from_array(np.array(value, np.float32), "optimize.mask_value"),
            ]
        )
        new = [
            helper.make_node("Not", [equal.output[0]], ["optimize.real_token"], name="optimize.Not"),
            helper.make_node("Cast", ["optimize.real_token"], ["optimize.mask_2d"], to=TensorProto.INT64),
            helper.make_node("Unsqueeze", ["optimize.mask_2d", "optimize.axis_1"], ["optimize.mask_3d"]),
            helper.make_node("Unsqueeze", ["optimize.mask_3d", "optimize.axis_1"], ["optimize.mask_4d"]),
            helper.make_node("Cast", ["optimize.mask_4d"], ["optimize.mask_float"], to=TensorProto.FLOAT),
            helper.make_node("Sub", ["optimize.one", "optimize.mask_float"], ["optimize.pad_float"]),
            helper.make_node("Mul", ["optimize.pad_float", "optimize.mask_value"], ["optimize.mask_bias"]),
        ]
        for consumer in consumers[node.output[0]]:
            consumer.input[:] = ["optimize.mask_bias" if n == node.output[0] else n for n in consumer.input]
        added.append((node, new))
    if len(added) != 1:
        raise BadCheckpointError(f"found {len(added)} attention masks built from input_ids; expected one", FIX)
    return added


def _rewrite_query_scales(graph, kept: list, initializers: dict, producer: dict) -> list[tuple[object, list]]:
    """Softmax(Add(MatMul(Add(Mul(q, s), 0), kT), mask)) -> Softmax(Add(Div(MatMul(q, kT), 1/s), mask)), in every
    attention block. Returns (node to insert after, new nodes), one per block; raises when there is none or one is
    not in that form."""
    from onnx import helper, numpy_helper

    added: list[tuple[object, list]] = []
    for softmax in [n for n in kept if n.op_type == "Softmax"]:
        blocks = len(added)
        add = _parent(producer, softmax, 0, "Add")
        matmul = add and _parent(producer, add, 0, "MatMul")
        scale_add = matmul and _parent(producer, matmul, 0, "Add")
        scale_mul = scale_add and _parent(producer, scale_add, 0, "Mul")
        scale = scale_mul and _scalar(initializers, scale_mul.input[1])
        if not scale or _scalar(initializers, scale_add.input[1]) != 0 or add.input[1] != "optimize.mask_bias":
            raise BadCheckpointError(
                f"attention block {blocks} ({softmax.name}) is not the form paddle2onnx writes", FIX
            )
        divisor, scaled = f"optimize.inverse_scale.{blocks}", f"optimize.scaled_qk.{blocks}"
        graph.initializer.append(numpy_helper.from_array(np.array(1.0 / np.float32(scale), np.float32), divisor))
        matmul.input[0] = scale_mul.input[0]
        add.input[0] = scaled
        added.append((matmul, [helper.make_node("Div", [matmul.output[0], divisor], [scaled])]))
    if not added:
        raise BadCheckpointError("found no attention block (Softmax) in the graph", FIX)
    return added


def _replace_nodes(graph, kept: list, added: list[tuple[object, list]], outputs: set[str]) -> None:
    """The graph's nodes become `kept` with the new nodes each after its anchor, less what no longer leads to an
    output (the old mask and scale nodes, the Identity nodes), and its initializers those still read."""
    order = []
    after = {id(node): new for node, new in added}
    for node in kept:
        order.append(node)
        order.extend(after.get(id(node), []))
    # Drop what no longer leads to the output (the old mask and scale nodes).
    live, reachable = set(outputs), []
    for node in reversed(order):
        if any(out in live for out in node.output):
            reachable.append(node)
            live.update(node.input)
    del graph.node[:]
    graph.node.extend(reversed(reachable))
    used = {name for node in graph.node for name in node.input}
    unused = [i for i in graph.initializer if i.name not in used]
    for init in unused:
        graph.initializer.remove(init)


def prepare_for_fusion(model) -> int:
    """Rewrite a paddle2onnx ERNIE graph in place so that onnxruntime's attention fusion matches it. Returns the
    number of attention blocks rewritten; raises when the graph is not the shape this rewrite knows."""
    from onnx import numpy_helper

    graph = model.graph
    initializers = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    outputs = {o.name for o in graph.output}
    kept = _drop_identities(graph, outputs)
    producer = {out: node for node in kept for out in node.output}
    mask = _rewrite_mask(graph, kept, initializers, producer)
    scales = _rewrite_query_scales(graph, kept, initializers, producer)
    _replace_nodes(graph, kept, [*mask, *scales], outputs)
    return len(scales)


def optimize_transformer(fp32_onnx: str | Path, out_path: str | Path) -> dict:
    """onnxruntime's BERT fusions (Attention, SkipLayerNormalization, BiasGelu) of a paddle2onnx ERNIE model into
    out_path (atomically). Every attention block must fuse and the inputs and output must stay as they were.
    Returns counts of the fused ops."""
    import onnx
    from onnxruntime.transformers.fusion_options import AttentionMaskFormat, FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    fp32_onnx, out_path = Path(fp32_onnx), Path(out_path)
    reference = onnx.load(str(fp32_onnx))
    model = onnx.load(str(fp32_onnx))
    blocks = prepare_for_fusion(model)
    options = FusionOptions("bert")
    options.attention_mask_format = AttentionMaskFormat.AttentionMask  # the 2D mask as is: see the module doc
    # Paddle's position ids come from a CumSum over ones, which EmbedLayerNormalization's matcher does not take.
    options.enable_embed_layer_norm = False
    with tempfile.TemporaryDirectory(prefix="ernie-deploy-optimize.") as work:
        src = Path(work) / "prepared.onnx"
        onnx.save(model, str(src))
        with _quiet_onnxruntime_tools():
            # opt_level 0: the graph fusions only; onnxruntime's own session optimizations still run at load.
            optimized = optimize_model(str(src), model_type="bert", optimization_options=options, opt_level=0)
        fused = optimized.model
    if not any(o.domain == "com.microsoft" for o in fused.opset_import):  # as save_model_to_file would add
        fused.opset_import.append(onnx.helper.make_opsetid("com.microsoft", 1))
    counts = dict(collections.Counter(n.op_type for n in fused.graph.node if n.domain == "com.microsoft"))
    if counts.get("Attention", 0) != blocks:
        raise BadCheckpointError(
            f"onnxruntime fused {counts.get('Attention', 0)} of the {blocks} attention blocks of {fp32_onnx}", FIX
        )
    _require_same_signature(reference, fused, out_path, "optimized", FIX)
    with atomic_path(out_path, suffix=".onnx") as tmp:
        onnx.save(fused, str(tmp))
        _smoke_run(tmp)
    return {"fused": counts}
