"""The tensors of an ONNX file and of a Triton config, in one form (TensorSpec) so that they can be compared."""

from __future__ import annotations

from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from ernie_deploy.core.errors import BadCheckpointError
from ernie_deploy.core.tasks import TensorSpec

# ONNX TensorProto element type -> Triton's data type name (without the TYPE_ prefix)
# (8, STRING: the label names a graph postprocess returns, Triton's BYTES)
_ONNX_TO_TRITON = {1: "FP32", 10: "FP16", 6: "INT32", 7: "INT64", 9: "BOOL", 16: "BF16", 8: "BYTES"}


def onnx_signature(path: str | Path) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """Inputs and outputs of an ONNX file as TensorSpecs, the leading (batch) axis dropped, dynamic axes -1."""
    import onnx

    return model_signature(onnx.load(str(path), load_external_data=False), path)


def model_signature(model, path: str | Path = "<graph>") -> tuple[list[TensorSpec], list[TensorSpec]]:
    """`onnx_signature` of a loaded ModelProto (e.g. one built in memory); `path` names it in errors."""
    initializers = {i.name for i in model.graph.initializer}

    def spec(value) -> TensorSpec:
        tensor = value.type.tensor_type
        if tensor.elem_type not in _ONNX_TO_TRITON:
            raise BadCheckpointError(
                f"{path}: tensor {value.name!r} has unsupported element type {tensor.elem_type}",
                "export the model with inputs and outputs of the ONNX element types Triton serves here: "
                + ", ".join(f"{number} ({name})" for number, name in _ONNX_TO_TRITON.items()),
            )
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim]
        if not dims or dims[0] not in (-1,):
            raise BadCheckpointError(
                f"{path}: tensor {value.name!r} has no dynamic batch axis (dims {dims})",
                "export with a dynamic batch dimension",
            )
        return TensorSpec(value.name, _ONNX_TO_TRITON[tensor.elem_type], tuple(dims[1:]))

    inputs = [spec(v) for v in model.graph.input if v.name not in initializers]
    return inputs, [spec(v) for v in model.graph.output]


def spec_of(tensor) -> TensorSpec:
    """A config tensor as a TensorSpec (Triton's TYPE_STRING is BYTES, as in ONNX signatures)."""
    name = mc.DataType.Name(tensor.data_type).removeprefix("TYPE_")
    return TensorSpec(tensor.name, "BYTES" if name == "STRING" else name, tuple(tensor.dims))
