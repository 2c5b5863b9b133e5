"""The repository check's ONNX part: which models serve an ONNX file as it is, and whether each such model's
config.pbtxt declares that file's inputs and outputs (names, data types, dims) as the server will need them."""

from __future__ import annotations

from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.tasks import WINDOW_INPUTS
from ernie_deploy.repository.layouts import entry_record, layout_of
from ernie_deploy.repository.problem import Problem
from ernie_deploy.repository.signature import onnx_signature, spec_of
from ernie_deploy.repository.windows import windowed_signature


def _dims_fit(config_dims: tuple, onnx_dims: tuple) -> bool:
    # a dynamic ONNX axis accepts any config value; a fixed one must be repeated
    return len(config_dims) == len(onnx_dims) and all(o == -1 or c == o for c, o in zip(config_dims, onnx_dims))


def onnx_file(config: mc.ModelConfig, graph_models: set[str]) -> str | None:
    """The ONNX file name in the version folder when the config's tensors are that file's, else None: an ORT backend
    model, or a python model its layout says serves the file as it is (Layout.graph_models; a fused model or a model
    step that tokenizes also holds model.onnx, but takes text)."""
    if config.platform == "onnxruntime_onnx" or config.backend == "onnxruntime":
        return config.default_model_filename or "model.onnx"
    if config.backend == "python" and config.name in graph_models and "model_file" in config.parameters:
        return config.parameters["model_file"].string_value
    return None


def graph_serving_models(configs: dict[str, mc.ModelConfig]) -> set[str]:
    """The models whose layouts say they serve their ONNX file as it is (Layout.graph_models), over every served
    task in the repository."""

    out = set()
    for name, config in configs.items():
        try:
            model = entry_record(name, config)
            if model is not None:
                out.update(layout_of(name, configs).graph_models(model))
        except ErnieDeployError:  # an unknown task or layout is reported where that config is checked
            continue
    return out


def _tensor_problems(name: str, kind: str, tensors, specs, file_name: str, batched: bool) -> list[Problem]:
    """The config's `kind` ("input" or "output") tensors against the ONNX file's: each config tensor's name, data
    type and dims, then each file tensor the config leaves out."""
    problems = []
    by_name = {s.name: s for s in specs}
    for tensor in tensors:
        spec = by_name.get(tensor.name)
        if spec is None:
            problems.append(
                Problem(
                    name,
                    f"{kind} {tensor.name!r} is not in {file_name} (it has {sorted(by_name)})",
                    f"use the ONNX {kind} names in config.pbtxt",
                )
            )
            continue
        if spec_of(tensor).data_type != spec.data_type:
            problems.append(
                Problem(
                    name,
                    f"{kind} {tensor.name!r} is {spec_of(tensor).data_type} in config.pbtxt "
                    f"but {spec.data_type} in {file_name}",
                    f"set data_type: TYPE_{spec.data_type}",
                )
            )
        problems.extend(_dims_problems(name, kind, tensor, spec, file_name, batched))
    named = {t.name for t in tensors}
    for spec in specs:
        if spec.name not in named:
            problems.append(
                Problem(
                    name,
                    f"{file_name} {kind} {spec.name!r} is missing from config.pbtxt",
                    f"add {kind} {spec.name!r} to config.pbtxt",
                )
            )
    return problems


def _dims_problems(name: str, kind: str, tensor, spec, file_name: str, batched: bool) -> list[Problem]:
    """A config tensor's dims against the ONNX tensor's, naming the usual mistake: the batch axis written out."""
    dims = tuple(tensor.dims)
    # without batching Triton hands the model the whole shape, batch axis included
    want = spec.dims if batched else (-1, *spec.dims)
    if _dims_fit(dims, want):
        return []
    if batched and _dims_fit(dims[1:], want) and len(dims) == len(want) + 1:
        return [
            Problem(
                name,
                f"{kind} {tensor.name!r} dims {list(dims)} include the batch "
                f"dimension; with max_batch_size > 0 it must be left out",
                f"set dims: {list(want)}",
            )
        ]
    return [
        Problem(
            name,
            f"{kind} {tensor.name!r} dims {list(dims)} do not fit {file_name}'s {list(want)}",
            f"set dims: {list(want)}",
        )
    ]


def check_onnx(name: str, config: mc.ModelConfig, version: Path, file_name: str) -> list[Problem]:
    """The config's tensors against the ONNX file's in one version folder: names, data types and dims, each way."""
    path = version / file_name
    if not path.is_file():
        return [
            Problem(name, f"no {file_name} in {version.name}/", "copy the converted model there (`ernie-deploy build`)")
        ]
    try:
        inputs, outputs = onnx_signature(path)
    except ErnieDeployError as exc:
        return [Problem(name, exc.problem, exc.fix or "re-export the model")]
    except Exception as exc:  # noqa: BLE001 - a corrupt file is a finding here, not a crash
        return [Problem(name, f"{version.name}/{file_name} does not load: {exc}", "convert the model again")]
    if config.backend == "python" and [t.name for t in config.input] == list(WINDOW_INPUTS):
        # A windowed python model step feeds the converted file window by window (repository/windows.py).

        inputs, outputs = windowed_signature(inputs, outputs)
    batched = config.max_batch_size > 0
    problems = []
    for kind, tensors, specs in (("input", config.input, inputs), ("output", config.output, outputs)):
        problems.extend(_tensor_problems(name, kind, tensors, specs, file_name, batched))
    return problems
