"""Assemble a Triton model repository: configs generated from typed protobuf objects and the ONNX signature.

Layout (both tasks, one shared vocabulary):
    ernie_tokenizer/              python backend: text -> input_ids, token_type_ids, offsets, lengths, truncated
    ernie_seqcls_model/           the ONNX model: platform onnxruntime_onnx, or python backend running onnxruntime
    ernie_seqcls_postprocess/     python backend: logits -> label_id, label, confidence
    ernie_seqcls/                 ensemble: tokenizer -> model -> postprocess
    ernie_tokencls_model/         the ONNX model, [batch, tokens, labels] logits
    ernie_tokencls_postprocess/   python backend: logits, text, offsets, lengths -> entities (JSON)
    ernie_tokencls/               ensemble: tokenizer -> model -> postprocess; entities and truncated
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.files import atomic_path
from ernie_deploy.repository.options import (
    DEFAULT_MAX_BATCH_SIZE,
    ORT_GRAPH_LEVELS,
    BuildOptions,
    check_options,
)
from ernie_deploy.core.tasks import LOGITS, MODEL_INPUTS, TEXT_INPUT, TOKENIZER_OUTPUTS, TOKENIZER_STEP, TaskSpec, TensorSpec

VERSION = "1"


# -- ONNX signature ---------------------------------------------------------------------------------

_ONNX_TO_TRITON = {1: "FP32", 10: "FP16", 6: "INT32", 7: "INT64", 9: "BOOL", 16: "BF16"}


def onnx_signature(path: str | Path) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """Inputs and outputs of an ONNX file as TensorSpecs, the leading (batch) axis dropped, dynamic axes -1."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    initializers = {i.name for i in model.graph.initializer}

    def spec(value) -> TensorSpec:
        tensor = value.type.tensor_type
        if tensor.elem_type not in _ONNX_TO_TRITON:
            raise ErnieDeployError(f"{path}: tensor {value.name!r} has unsupported element type {tensor.elem_type}")
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim]
        if not dims or dims[0] not in (-1,):
            raise ErnieDeployError(f"{path}: tensor {value.name!r} has no dynamic batch axis (dims {dims})",
                                   "export with a dynamic batch dimension")
        return TensorSpec(value.name, _ONNX_TO_TRITON[tensor.elem_type], tuple(dims[1:]))

    inputs = [spec(v) for v in model.graph.input if v.name not in initializers]
    return inputs, [spec(v) for v in model.graph.output]


# -- config objects -------------------------------------------------------------------------------


def _tensor(message, spec: TensorSpec):
    message.name = spec.name
    message.data_type = mc.DataType.Value("TYPE_STRING" if spec.data_type == "BYTES" else f"TYPE_{spec.data_type}")
    message.dims.extend(spec.dims)
    return message


def _base(name: str, inputs, outputs, options: BuildOptions, *, backend: str = "", platform: str = "",
          batching: bool = True, params: dict | None = None) -> mc.ModelConfig:
    config = mc.ModelConfig(name=name, backend=backend, platform=platform, max_batch_size=options.max_batch_size)
    batching = batching and options.batching
    for spec in inputs:
        tensor = _tensor(config.input.add(), spec)
        # Triton's batcher merges only requests whose shapes match, so texts of different lengths would
        # never share a batch. A python step reads each request on its own (and pads them together in
        # ernie_deploy.serving.steps), so it can take them ragged.
        tensor.allow_ragged_batch = batching and options.ragged and backend == "python" and -1 in spec.dims
    for spec in outputs:
        _tensor(config.output.add(), spec)
    if batching:
        config.dynamic_batching.max_queue_delay_microseconds = options.max_queue_delay_us
    if platform != "ensemble":
        config.instance_group.add(kind=mc.ModelInstanceGroup.KIND_CPU, count=1 if options.classic else options.instances)
        _add_warmup(config)
    for key, value in (params or {}).items():
        config.parameters[key].string_value = str(value)
    return config


WARMUP_TEXT = "ERNIE 预热：新华社北京电。"
WARMUP_TOKENS = 16  # the length given to token-level warmup tensors (dims of -1)


def _add_warmup(config: mc.ModelConfig) -> None:
    """One warmup request per instance, run by Triton before the model is ready: a python step's first
    execute was measured at 70-85 ms (the stub's first round trip), the later ones at well under 1 ms."""
    warmup = config.model_warmup.add(name="warmup", batch_size=1)
    for tensor in config.input:
        item = warmup.inputs[tensor.name]
        item.data_type = tensor.data_type
        item.dims.extend(WARMUP_TOKENS if d == -1 else d for d in tensor.dims)
        if tensor.data_type == mc.TYPE_STRING:
            item.input_data_file = tensor.name  # read from <model>/warmup/<name>, written by `build`
        else:
            item.zero_data = True


def warmup_files(config: mc.ModelConfig) -> dict[str, bytes]:
    """<model>/warmup/ file name -> contents: BYTES elements as Triton reads them (4-byte little-endian
    length, then the bytes)."""
    import struct

    text = WARMUP_TEXT.encode("utf-8")
    return {item.input_data_file: struct.pack("<I", len(text)) + text
            for w in config.model_warmup for item in w.inputs.values() if item.input_data_file}


def tokenizer_config(name: str, max_seq_len: int, options: BuildOptions) -> mc.ModelConfig:
    multiple = max_seq_len if options.classic else options.pad_to_multiple_of
    params = {"tokenizer_file": "tokenizer.json", "max_seq_len": max_seq_len}
    if multiple > 1:
        params["pad_to_multiple_of"] = multiple
    return _base(name, [TEXT_INPUT], list(TOKENIZER_OUTPUTS), options, backend="python", params=params)


def model_config(task: TaskSpec, inputs, outputs, options: BuildOptions, pad_token_id: int = 0) -> mc.ModelConfig:
    if options.runtime == "onnxruntime":
        # The ORT backend's own parameter names; 0 leaves onnxruntime's default.
        params = {}
        if options.ort_threads:
            params["intra_op_thread_count"] = options.ort_threads
        if options.ort_inter_op_threads:
            params["inter_op_thread_count"] = options.ort_inter_op_threads
            params["execution_mode"] = 1  # parallel; the sequential default ignores inter_op_thread_count
        config = _base(task.model_step, inputs, outputs, options, platform="onnxruntime_onnx", params=params)
        config.default_model_filename = "model.onnx"
        if ORT_GRAPH_LEVELS[options.ort_graph_level]:
            config.optimization.graph.level = ORT_GRAPH_LEVELS[options.ort_graph_level]
        if options.device == "gpu":
            # one group of `instances` per visible GPU
            config.instance_group[0].kind = mc.ModelInstanceGroup.KIND_GPU
        if options.trt_fp16:
            accelerator = config.optimization.execution_accelerators.gpu_execution_accelerator.add(name="tensorrt")
            accelerator.parameters["precision_mode"] = "FP16"
        return config
    params = {"model_file": "model.onnx", "pad_token_id": pad_token_id}
    if options.ort_threads:
        params["intra_op_threads"] = options.ort_threads
    if options.ort_spinning:
        params["ort_spinning"] = "true"
    return _base(task.model_step, inputs, outputs, options, backend="python", params=params)


def postprocess_config(task: TaskSpec, logits: TensorSpec, options: BuildOptions) -> mc.ModelConfig:
    inputs = [logits, *task.postprocess_extra_inputs]
    outputs = [o for o in task.outputs if o.name not in {t.name for t in TOKENIZER_OUTPUTS}]
    return _base(task.postprocess_step, inputs, outputs, options, backend="python",
                 params={"labels_file": "labels.json"})


def ensemble_config(task: TaskSpec, steps: list[mc.ModelConfig], options: BuildOptions) -> mc.ModelConfig:
    """Wire the steps by tensor name: a step input is the ensemble's input of that name or an earlier step's
    output of that name. A step output is mapped only where a later step or the caller reads it: Triton
    rejects ensemble tensors that lead nowhere."""
    produced: dict[str, TensorSpec] = {TEXT_INPUT.name: TEXT_INPUT}
    for step in steps:
        for tensor in step.input:
            if tensor.name not in produced:
                raise ErnieDeployError(f"ensemble {task.ensemble}: step {step.name} reads {tensor.name!r}, "
                                       "which no earlier step produces")
        produced.update({o.name: spec_of(o) for o in step.output})
    missing = [o.name for o in task.outputs if o.name not in produced]
    if missing:
        raise ErnieDeployError(f"ensemble {task.ensemble}: no step produces {missing}")
    read = {t.name for step in steps for t in step.input} | {o.name for o in task.outputs}
    config = _base(task.ensemble, [TEXT_INPUT], [produced[o.name] for o in task.outputs], options,
                   platform="ensemble", batching=False)
    for step in steps:
        entry = config.ensemble_scheduling.step.add(model_name=step.name, model_version=-1)
        for tensor in step.input:
            entry.input_map[tensor.name] = tensor.name
        for tensor in step.output:
            if tensor.name in read:
                entry.output_map[tensor.name] = tensor.name
    return config


def spec_of(tensor) -> TensorSpec:
    """A config tensor as a TensorSpec (Triton's TYPE_STRING is BYTES, as in ONNX signatures)."""
    name = mc.DataType.Name(tensor.data_type).removeprefix("TYPE_")
    return TensorSpec(tensor.name, "BYTES" if name == "STRING" else name, tuple(tensor.dims))


def task_configs(task: TaskSpec, onnx_path: str | Path, options: BuildOptions,
                 tokenizer_step: str = TOKENIZER_STEP, pad_token_id: int = 0) -> list[mc.ModelConfig]:
    """Tokenizer, model, postprocess and ensemble configs for a task, derived from the ONNX file; names and
    dims are checked, not assumed."""
    check_options(options)
    inputs, outputs = onnx_signature(onnx_path)
    names = sorted(s.name for s in inputs)
    if names != sorted(MODEL_INPUTS) or [o.name for o in outputs] != [LOGITS]:
        raise ErnieDeployError(
            f"{onnx_path} has inputs {names} and outputs {[o.name for o in outputs]}; "
            f"the pipeline feeds {list(MODEL_INPUTS)} and reads {LOGITS!r}",
            "convert with `ernie-deploy convert`, which names the tensors")
    by_name = {s.name: s for s in inputs}
    tokenized = {t.name: t for t in TOKENIZER_OUTPUTS}
    for name in MODEL_INPUTS:
        if by_name[name].data_type != tokenized[name].data_type or len(by_name[name].dims) != 1:
            raise ErnieDeployError(
                f"{onnx_path}: input {name!r} is {by_name[name].data_type} with dims {list(by_name[name].dims)} "
                f"per item; the tokenizer feeds {tokenized[name].data_type} [-1]",
                "export with int64 [batch, sequence] inputs (`ernie-deploy export`)")
    expected_rank = {"seq_cls": 1, "token_cls": 2}.get(task.name)
    if expected_rank and len(outputs[0].dims) != expected_rank:
        raise ErnieDeployError(
            f"{onnx_path}: {LOGITS!r} has dims {list(outputs[0].dims)} per item, which does not fit task "
            f"{task.name} ({'[classes]' if expected_rank == 1 else '[tokens, classes]'})",
            f"export the checkpoint with --task {task.name}, or pick the task the model was trained for")
    ordered = [by_name[n] for n in MODEL_INPUTS]
    steps = [tokenizer_config(tokenizer_step, task.max_seq_len, options),
             model_config(task, ordered, outputs, options, pad_token_id), postprocess_config(task, outputs[0], options)]
    ensemble = ensemble_config(task, steps, options)
    if options.fused:
        return [fused_config(task, steps, ensemble, options)]
    return steps + [ensemble]


def fused_config(task: TaskSpec, steps: list[mc.ModelConfig], ensemble: mc.ModelConfig,
                 options: BuildOptions) -> mc.ModelConfig:
    """The ensemble's interface as one python model whose parameters are its steps' parameters."""
    if options.runtime != "python":
        raise ErnieDeployError("a fused model runs onnxruntime inside the python backend",
                               "build it with --runtime python, or drop --fused to use the ORT backend")
    params = {key: value.string_value for step in steps for key, value in step.parameters.items()}
    params["postprocess"] = f"{task.name}_postprocess"
    return _base(task.ensemble, [TEXT_INPUT], [spec_of(o) for o in ensemble.output], options, backend="python",
                 params=params)


@dataclass(frozen=True)
class TaskArtifacts:
    """What `build` needs of one task: its spec, the converted model, the vocabulary and the label names."""

    task: TaskSpec
    onnx: Path
    vocab_file: Path
    labels: list[str]


def tokenizer_steps(entries: list[TaskArtifacts]) -> dict[str, str]:
    """task name -> tokenizer step name. Tasks with the same vocab.txt and max_seq_len share one tokenizer
    model (real ERNIE 3.0 checkpoints of one size share a vocabulary); it is `ernie_tokenizer` when the
    repository needs only one, else `<ensemble>_tokenizer` after the first task of each group."""
    groups: dict[tuple[str, int], list[TaskSpec]] = {}
    for entry in sorted(entries, key=lambda e: e.task.name):
        key = (hashlib.sha256(Path(entry.vocab_file).read_bytes()).hexdigest(), entry.task.max_seq_len)
        groups.setdefault(key, []).append(entry.task)
    if len(groups) == 1:
        return {e.task.name: TOKENIZER_STEP for e in entries}
    return {task.name: f"{tasks[0].ensemble}_tokenizer" for tasks in groups.values() for task in tasks}


def pad_token_id(vocab_file: str | Path) -> int:
    """The id the tokenizer pads with, which the python model step must pad with too."""
    from ernie_deploy.serving.tokenizer import PAD, read_vocab

    return read_vocab(vocab_file)[PAD]


# -- files ----------------------------------------------------------------------------------------


def render(config: mc.ModelConfig) -> str:
    return text_format.MessageToString(config)


def parse(text: str) -> mc.ModelConfig:
    return text_format.Parse(text, mc.ModelConfig())


MODEL_PY = '''"""Triton python model `{name}`: the `{step}` step of ernie_deploy.serving.steps (generated by `ernie-deploy build`)."""

from ernie_deploy.serving.triton_model import StepModel


class TritonPythonModel(StepModel):
    step = "{step}"
'''


def _python_step(config: mc.ModelConfig, task: TaskSpec) -> str | None:
    if config.backend != "python":
        return None
    if config.name == task.ensemble:
        return "pipeline"
    if config.name == task.model_step:
        return "onnx"
    if config.name == task.postprocess_step:
        return f"{task.name}_postprocess"
    return "tokenizer"


def write_text(path: Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def build(entries: list[TaskArtifacts] | TaskArtifacts, repository: str | Path,
          options: BuildOptions = BuildOptions()) -> list[Path]:
    """Write each task's models into `repository` (one tokenizer per vocabulary); returns the configs written.

    Every model is generated whole in a staging folder next to the repository and only then moved in, one
    folder rename per model: an interrupted or failed build leaves the previous models as they were, and
    no model folder ever mixes files of two builds. Other models in the repository are left alone."""
    entries = [entries] if isinstance(entries, TaskArtifacts) else list(entries)
    if len({e.task.name for e in entries}) != len(entries):
        raise ErnieDeployError("a task is listed twice", "build each task once")
    repository = Path(repository).absolute()
    repository.mkdir(parents=True, exist_ok=True)
    tokenizers = tokenizer_steps(entries)
    plans = [(e, task_configs(e.task, e.onnx, options, tokenizers[e.task.name], pad_token_id(e.vocab_file)))
             for e in entries]
    staging = Path(tempfile.mkdtemp(prefix=f".{repository.name}.staging-", dir=repository.parent))
    try:
        written = _write_models(plans, staging / "new", options, tokenizers)
        (staging / "old").mkdir()
        for model_dir in sorted((staging / "new").iterdir()):
            final = repository / model_dir.name
            if final.exists():
                os.replace(final, staging / "old" / model_dir.name)
            os.replace(model_dir, final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return [repository / path.relative_to(staging / "new") for path in written]


def _write_models(plans, repository: Path, options: BuildOptions, tokenizers: dict[str, str]) -> list[Path]:
    from ernie_deploy.serving.tokenizer import save_tokenizer

    written = []
    for entry, configs in plans:
        for config in configs:
            model_dir = repository / config.name
            version_dir = model_dir / VERSION
            version_dir.mkdir(parents=True, exist_ok=True)
            write_text(model_dir / "config.pbtxt", render(config))
            for name, data in warmup_files(config).items():
                with atomic_path(model_dir / "warmup" / name) as tmp:
                    tmp.write_bytes(data)
            if model_dir / "config.pbtxt" not in written:
                written.append(model_dir / "config.pbtxt")
            step = _python_step(config, entry.task)
            if step:
                write_text(version_dir / "model.py", MODEL_PY.format(name=config.name, step=step))
        task = entry.task
        homes = ({name: task.ensemble for name in ("tokenizer", "model", "labels")} if options.fused else
                 {"tokenizer": tokenizers[task.name], "model": task.model_step, "labels": task.postprocess_step})
        save_tokenizer(entry.vocab_file, repository / homes["tokenizer"] / VERSION / "tokenizer.json")
        with atomic_path(repository / homes["model"] / VERSION / "model.onnx", suffix=".onnx") as tmp:
            shutil.copyfile(entry.onnx, tmp)
        write_text(repository / homes["labels"] / VERSION / "labels.json",
                   json.dumps(entry.labels, ensure_ascii=False, indent=2) + "\n")
    for version_dir in repository.glob(f"*/{VERSION}"):
        if not any(version_dir.iterdir()):  # an ensemble's version folder: keep it when committed to git
            (version_dir / ".gitkeep").touch()
    return written


def pick_runtime(backends: set[str]) -> str:
    """`--runtime auto`: the ORT backend when the target server has it, else the python-backend model step."""
    return "onnxruntime" if "onnxruntime" in backends else "python"
