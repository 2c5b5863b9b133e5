"""The Triton configs a layout composes (repository/layouts), built as tritonclient's typed ModelConfig from the ONNX
signature: tokenizer, model, postprocess and ensemble, each warmed up before it reports ready."""

from __future__ import annotations

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.io import IO_PARAMETER
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.core.tasks import (
    TASK_PARAMETER,
    TEXT_INPUT,
    TOKENIZER_OUTPUTS,
    WINDOW_OUTPUTS,
    TensorSpec,
)
from ernie_deploy.repository.options import (
    ORT_GRAPH_LEVELS,
    BuildOptions,
    head_tokens,
    long_text_mode,
    model_io,
    ner_decoding,
    window_cut,
    window_size,
    window_stride,
)
from ernie_deploy.repository.signature import spec_of


def _tensor(message, spec: TensorSpec):
    message.name = spec.name
    message.data_type = mc.DataType.Value("TYPE_STRING" if spec.data_type == "BYTES" else f"TYPE_{spec.data_type}")
    message.dims.extend(spec.dims)
    return message


def base_config(
    name: str,
    inputs,
    outputs,
    options: BuildOptions,
    *,
    backend: str = "",
    platform: str = "",
    batching: bool = True,
    params: dict | None = None,
) -> mc.ModelConfig:
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
        if options.max_queue_size or options.queue_timeout_us:
            policy = config.dynamic_batching.default_queue_policy
            policy.timeout_action = mc.ModelQueuePolicy.REJECT
            policy.max_queue_size = options.max_queue_size
            policy.default_timeout_microseconds = options.queue_timeout_us
    if platform != "ensemble":
        count = 1 if options.classic else options.instances
        config.instance_group.add(kind=mc.ModelInstanceGroup.KIND_CPU, count=count)
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
    return {
        item.input_data_file: struct.pack("<I", len(text)) + text
        for w in config.model_warmup
        for item in w.inputs.values()
        if item.input_data_file
    }


# The tokenizer config parameters that only a model reading windows uses.
WINDOW_PARAMETERS = ("window_size", "window_stride", "window_cut")


def tokenizer_config(name: str, model: ModelSpec, options: BuildOptions) -> mc.ModelConfig:
    """The tokenizer model of `model` (one text, or a text and its pair), as `options` settle its reading. Each
    parameter is one of the model's record under the same name and value, or a tokenizer setting of a name no record
    field has (the limits of both readings a shared tokenizer enforces: serving.limits)."""
    max_seq_len, inputs = model.max_seq_len, model.task_spec.inputs
    multiple = max_seq_len if options.classic else options.pad_to_multiple_of
    # The request limits live with the tokenizer that enforces them (and so in its fingerprint).
    params = {"tokenizer_file": "tokenizer.json", "max_seq_len": max_seq_len, **options.limits.parameters()}
    outputs = list(TOKENIZER_OUTPUTS)
    if len(inputs) == 1:
        # How long texts are cut: part of the config, so the fingerprint keeps tokenizers of different cuts apart.
        # A tokenizer step holds the windows it cuts for whichever model asks for them, so that a classifier's and a
        # token model's can be one shared step; a layout that merges it into the model's own config keeps them only
        # where the model reads windows (layouts.base.Parts.own_parameters), as its record says.
        params["window_stride"] = window_stride(options, max_seq_len)
        params["window_cut"] = window_cut(options)
        if window_size(options, max_seq_len) != max_seq_len:
            params["window_size"] = window_size(options, max_seq_len)
        if head_tokens(options, max_seq_len) is not None:
            params["head_tokens"] = head_tokens(options, max_seq_len)
    else:
        # A pair is cut the longer text first (serving.encoding.encode_pairs), never windowed: windows serve
        # token models, which read one text.
        outputs = [t for t in outputs if t.name not in WINDOW_OUTPUTS]
    if multiple > 1:
        params["pad_to_multiple_of"] = multiple
    return base_config(name, list(inputs), outputs, options, backend="python", params=params)


def model_config(model: ModelSpec, inputs, outputs, options: BuildOptions, pad_token_id: int = 0) -> mc.ModelConfig:
    if options.runtime == "onnxruntime":
        # The ORT backend's own parameter names; 0 leaves onnxruntime's default.
        params = {}
        if options.ort_threads:
            params["intra_op_thread_count"] = options.ort_threads
        if options.ort_inter_op_threads:
            params["inter_op_thread_count"] = options.ort_inter_op_threads
            params["execution_mode"] = 1  # parallel; the sequential default ignores inter_op_thread_count
        config = base_config(model.model_step, inputs, outputs, options, platform="onnxruntime_onnx", params=params)
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
    if options.ort_spinning != "off":
        params["ort_spinning"] = options.ort_spinning
    return base_config(model.model_step, inputs, outputs, options, backend="python", params=params)


def postprocess_config(model: ModelSpec, logits: TensorSpec, options: BuildOptions) -> mc.ModelConfig:
    """The postprocess step: its NER decoding is the record's, unless options.ner_decoding overrides it."""
    from ernie_deploy.serving.entities import DECODING_PARAMETER

    inputs = [logits, *model.task_spec.postprocess_extra_inputs]
    outputs = [o for o in model.task_spec.outputs if o.name not in {t.name for t in TOKENIZER_OUTPUTS}]
    params = {"labels_file": "labels.json"}
    decoding = ner_decoding(model, options)
    if decoding is not None:
        params[DECODING_PARAMETER] = decoding  # written always, so `check` and a reader of the config see it
    if not model_wire(model, options).native:
        # It writes the answers the wire formats otherwise (serving.wire); the entry renames them.
        params[IO_PARAMETER] = model_wire(model, options).name
    if long_text_mode(model, options) == "window":
        # The windows' logits and where each window starts in the whole text; the postprocess merges them and
        # says itself whether every token was decided (`truncated`), which the tokenizer cannot know per model.
        tokenized = {t.name: t for t in TOKENIZER_OUTPUTS}
        merged_from = ("text_offsets", "text_lengths", "window_starts", "window_ends")
        inputs = [logits, TEXT_INPUT, *(tokenized[n] for n in merged_from)]
        outputs = [o for o in model.task_spec.outputs if o.name not in set(tokenized) - {"truncated"}]
        params["long_text"] = "window"
    if options.monitor:
        # It counts what it answers (serving.watch), which needs each text (its length) and whether it was cut: the
        # ensemble hands it the request's texts and the tokenizer's `truncated` where it does not say so itself.
        params.update(watch_parameters(model))
        have = {t.name for t in (*inputs, *outputs)}
        truncated = next(t for t in TOKENIZER_OUTPUTS if t.name == "truncated")
        inputs += [t for t in (*model.task_spec.inputs, truncated) if t.name not in have]
    return base_config(model.postprocess_step, inputs, outputs, options, backend="python", params=params)


def watch_parameters(model: ModelSpec) -> dict[str, str]:
    """What the step that answers needs to watch its answers: the model its series are labelled with, and its task
    (the kind's part of the watch, and the wire a shadowed candidate is asked in)."""
    from ernie_deploy.serving.watch import MONITOR_PARAMETER, WATCHED_TASK_PARAMETER

    return {MONITOR_PARAMETER: model.name, WATCHED_TASK_PARAMETER: model.task}


def ensemble_config(model: ModelSpec, steps: list[mc.ModelConfig], options: BuildOptions) -> mc.ModelConfig:
    """Wire the steps by tensor name: a step input is the ensemble's input of that name or an earlier step's
    output of that name. A step output is mapped only where a later step or the caller reads it: Triton
    rejects ensemble tensors that lead nowhere. The ensemble's own inputs and answers carry the names of the model's
    wire (core.io: `build --io`); inside it every tensor keeps the task's own name."""
    wire = model_wire(model, options)
    produced: dict[str, TensorSpec] = {t.name: t for t in model.task_spec.inputs}
    for step in steps:
        for tensor in step.input:
            if tensor.name not in produced:
                raise ErnieDeployError(
                    f"ensemble {model.name}: step {step.name} reads {tensor.name!r}, which no earlier step produces"
                )
        produced.update({o.name: spec_of(o) for o in step.output})
    missing = [name for name in wire.outputs if name not in produced]
    if missing:
        raise ErnieDeployError(f"ensemble {model.name}: no step produces {missing}")
    read = {t.name for step in steps for t in step.input} | set(wire.outputs)
    # A tensor two steps produce (`truncated`, from a windowed postprocess) is taken from the later one.
    source = {o.name: step.name for step in steps for o in step.output}
    answers = [TensorSpec(wire.outputs[name], produced[name].data_type, produced[name].dims) for name in wire.outputs]
    config = base_config(
        model.name,
        wire.input_specs(),
        answers,
        options,
        platform="ensemble",
        batching=False,
        params={TASK_PARAMETER: model.task},
    )
    for step in steps:
        entry = config.ensemble_scheduling.step.add(model_name=step.name, model_version=-1)
        for tensor in step.input:
            entry.input_map[tensor.name] = wire.inputs.get(tensor.name, tensor.name)
        for tensor in step.output:
            if tensor.name in read and source[tensor.name] == step.name:
                entry.output_map[tensor.name] = wire.outputs.get(tensor.name, tensor.name)
    return config


def model_wire(model: ModelSpec, options: BuildOptions):
    """The wire (core.io) `model` answers in under `options`."""
    from ernie_deploy.core.io import wire

    return wire(model.task_spec, model_io(model, options), model.name)


def render(config: mc.ModelConfig) -> str:
    return text_format.MessageToString(config)


def parse(text: str) -> mc.ModelConfig:
    return text_format.Parse(text, mc.ModelConfig())
