"""The Triton configs a layout composes (repository/layouts), built as tritonclient's typed ModelConfig: pure functions
of the model's record as served (repository.resolve), the ONNX signature and the pad id. Tokenizer, model,
postprocess and ensemble, each warmed up before it reports ready."""

from __future__ import annotations

from dataclasses import fields, replace

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from ernie_deploy.core.errors import BadCheckpointError
from ernie_deploy.core.settings import ORT_GRAPH_LEVELS, ServingSettings
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.core.tasks import (
    OPTIONS,
    TEXT_INPUT,
    TOKENIZER_OUTPUTS,
    WINDOW_OUTPUTS,
    TensorSpec,
)
from ernie_deploy.repository.signature import spec_of
from ernie_deploy.serving.limits import ReadingLimits, TextLimits
from ernie_deploy.serving.parameters import EXTRACTION, MODEL, POSTPROCESS, TOKENIZER, WATCH, Group, parameters
from ernie_deploy.serving.record_defaults import step_windows


def _tensor(message, spec: TensorSpec):
    message.name = spec.name
    message.data_type = mc.DataType.Value("TYPE_STRING" if spec.data_type == "BYTES" else f"TYPE_{spec.data_type}")
    message.dims.extend(spec.dims)
    if spec.optional:
        message.optional = True
    return message


def base_config(
    name: str,
    inputs,
    outputs,
    options: ServingSettings,
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

    def element(name: str) -> bytes:
        option = OPTIONS.get(name)  # what a request may send beside its texts: its example
        value = (option.example if option is not None else WARMUP_TEXT).encode("utf-8")
        return struct.pack("<I", len(value)) + value

    return {
        item.input_data_file: element(item.input_data_file)
        for w in config.model_warmup
        for item in w.inputs.values()
        if item.input_data_file
    }


# The tokenizer config parameters that only a model reading windows has.
WINDOW_PARAMETERS = ("window_size", "window_stride", "window_cut")


def tokenizer_config(name: str, model: ModelSpec) -> mc.ModelConfig:
    """The tokenizer model of `model` (one text, or a text and its pair), reading as its record says: each parameter
    is one of the record's fields under the same name and value, or a tokenizer setting of a name no record field
    has (the limits per reading: serving.limits)."""
    settings, max_seq_len, inputs = model.serving, model.max_seq_len, model.task_spec.inputs
    multiple = max_seq_len if settings.classic else settings.pad_to_multiple_of
    # The request limits live with the tokenizer that enforces them (and so in its fingerprint): the record's for
    # its own reading, the default for the other one (a tokenizer shared by a classifier and a token model serves
    # both readings, and is shared only where both agree).
    limits = TextLimits(model.max_text_chars, model.max_request_chars)
    reading = "windows" if model.long_text == "window" else "cut"
    outputs = list(TOKENIZER_OUTPUTS)
    windows = dict.fromkeys(WINDOW_PARAMETERS)
    if len(inputs) == 1:
        # How long texts are cut: part of the config, so the fingerprint keeps tokenizers of different cuts apart.
        # A tokenizer step holds the windows it cuts for whichever model asks for them (serving.record_defaults.
        # step_windows: the record's, else windows of max_seq_len), so that a classifier's and a token model's can be
        # one shared step; a layout that merges it into the model's own config keeps them only where the model reads
        # windows (layouts.base.Parts).
        held = step_windows(model)
        windows = {
            "window_size": held.size if held.size != max_seq_len else None,
            "window_stride": held.stride,
            "window_cut": held.cut,
        }
    else:
        # A pair is cut the longer text first (serving.encoding.encode_pairs), never windowed: windows serve
        # token models, which read one text.
        outputs = [t for t in outputs if t.name not in WINDOW_OUTPUTS]
    params = recorded_parameters(
        TOKENIZER,
        model,
        tokenizer_file="tokenizer.json",
        pad_to_multiple_of=multiple if multiple > 1 else None,
        **replace(ReadingLimits(), **{reading: limits}).parameters(),
        **windows,
    )
    return base_config(name, list(inputs), outputs, settings, backend="python", params=params)


def recorded_parameters(group: Group, model: ModelSpec, **values) -> dict[str, str]:
    """The parameters of a step (`group`, serving.parameters) that `model`'s record holds under the same name, with the
    record's values (None: absent), and `values`, which the caller works out (and which win): a record field a step
    reads reaches it with no code of its own here."""
    record = {f.name for f in fields(model)}
    recorded = {p.name: getattr(model, p.name) for p in group if p.name in record and p.name not in values}
    return group.parameters(**recorded, **values)


def _unless_default(parameter, value):
    """`value`, or None (the parameter left out) where it is what the step reads when the parameter is absent: the
    parameter's default, whose one home is serving.parameters."""
    return None if value == parameter.default else value


def model_config(model: ModelSpec, inputs, outputs, pad_token_id: int = 0) -> mc.ModelConfig:
    options = model.serving
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
    params = MODEL.parameters(
        model_file="model.onnx",
        pad_token_id=pad_token_id,
        intra_op_threads=options.ort_threads or None,
        ort_spinning=_unless_default(MODEL["ort_spinning"], options.ort_spinning),
    )
    return base_config(model.model_step, inputs, outputs, options, backend="python", params=params)


def postprocess_config(model: ModelSpec, logits: TensorSpec) -> mc.ModelConfig:
    """The postprocess step: its NER decoding, wire and reading are the record's."""
    inputs = [logits, *model.task_spec.postprocess_extra_inputs]
    # The raw logits a classifier answers on request are passed through by the postprocess, which reads them: an
    # ensemble tensor that a step reads and the caller reads too is pruned by Triton 2.51's ensemble when the caller
    # leaves it out, and the request then never finishes ("unexpected deadlock"), so the caller's comes from here.
    outputs = [o for o in model.task_spec.outputs if o.name not in {t.name for t in TOKENIZER_OUTPUTS}]
    params = recorded_parameters(
        POSTPROCESS,
        model,
        labels_file="labels.json",
        # a wire of another format: it writes the answers that way (serving.wire); the entry renames them
        io=None if model.wire.native else model.wire.name,
        long_text=True if model.long_text == "window" else None,
    )
    if model.long_text == "window":
        # The windows' logits and where each window starts in the whole text; the postprocess merges them and
        # says itself whether every token was decided (`truncated`), which the tokenizer cannot know per model.
        tokenized = {t.name: t for t in TOKENIZER_OUTPUTS}
        merged_from = ("text_offsets", "text_lengths", "window_starts", "window_ends")
        inputs = [logits, TEXT_INPUT, *(tokenized[n] for n in merged_from)]
        outputs = [o for o in model.task_spec.outputs if o.name not in set(tokenized) - {"truncated"}]
    if model.serving.monitor:
        # It counts what it answers (serving.watch), which needs each text (its length) and whether it was cut: the
        # ensemble hands it the request's texts and the tokenizer's `truncated` where it does not say so itself.
        params.update(watch_parameters(model))
        have = {t.name for t in (*inputs, *outputs)}
        truncated = next(t for t in TOKENIZER_OUTPUTS if t.name == "truncated")
        inputs += [t for t in (*model.task_spec.inputs, truncated) if t.name not in have]
    return base_config(model.postprocess_step, inputs, outputs, model.serving, backend="python", params=params)


def extraction_config(model: ModelSpec, pad_token_id: int = 0) -> mc.ModelConfig:
    """The one python model of a staged kind (UIE, kinds/uie/serving.py): its tokenizer, model, schema, position
    threshold, rows and limits as its record says. A row is `[CLS] prompt [SEP] text window [SEP]` of the record's
    window size; its limits are the windows reading's, as the whole text is read."""
    settings = model.serving
    params = recorded_parameters(
        EXTRACTION,
        model,
        tokenizer_file="tokenizer.json",
        model_file="model.onnx",
        pad_token_id=pad_token_id,
        intra_op_threads=settings.ort_threads or None,
        ort_spinning=_unless_default(EXTRACTION["ort_spinning"], settings.ort_spinning),
        window_max_text_chars=model.max_text_chars,
        window_max_request_chars=model.max_request_chars,
        labels_file="labels.json",
        task=model.task_spec,
        watched_model=model.name if settings.monitor else None,
    )
    return base_config(
        model.name, model.wire.input_specs(), model.wire.output_specs(), settings, backend="python", params=params
    )


def watch_parameters(model: ModelSpec) -> dict[str, str]:
    """What the step that answers needs to watch its answers: the model its series are labelled with, and its task
    (the kind's part of the watch, and the wire a shadowed candidate is asked in)."""
    return WATCH.parameters(watched_model=model.name, monitor_task=model.task_spec)


def ensemble_config(model: ModelSpec, steps: list[mc.ModelConfig]) -> mc.ModelConfig:
    """Wire the steps by tensor name: a step input is the ensemble's input of that name or an earlier step's
    output of that name. A step output is mapped only where a later step or the caller reads it: Triton
    rejects ensemble tensors that lead nowhere. The ensemble's own inputs and answers carry the names of the model's
    wire (core.io: `build --io`); inside it every tensor keeps the task's own name."""
    wire = model.wire
    produced: dict[str, TensorSpec] = {t.name: t for t in model.task_spec.inputs}
    for step in steps:
        for tensor in step.input:
            if tensor.name not in produced:
                raise BadCheckpointError(
                    f"ensemble {model.name}: step {step.name} reads {tensor.name!r}, which no earlier step produces",
                    "convert the model again with `ernie-deploy convert`, which names the tensors the steps read",
                )
        produced.update({o.name: spec_of(o) for o in step.output})
    missing = [name for name in wire.outputs if name not in produced]
    if missing:
        raise BadCheckpointError(
            f"ensemble {model.name}: no step produces {missing}",
            "convert the model again with `ernie-deploy convert`, which names the tensors the steps read",
        )
    read = {t.name for step in steps for t in step.input} | set(wire.outputs)
    # A tensor two steps produce (`truncated`, from a windowed postprocess) is taken from the later one.
    source = {o.name: step.name for step in steps for o in step.output}
    answers = [TensorSpec(wire.outputs[name], produced[name].data_type, produced[name].dims) for name in wire.outputs]
    config = base_config(
        model.name,
        wire.input_specs(),
        answers,
        model.serving,
        platform="ensemble",
        batching=False,
        params=parameters(task=model.task_spec),
    )
    # A tensor that a later step produces again (the logits a postprocess passes through) goes to the steps that read
    # it under a name of its own, so that the caller's tensor has one producer.
    inner: dict[str, str] = {}
    for i, step in enumerate(steps):
        entry = config.ensemble_scheduling.step.add(model_name=step.name, model_version=-1)
        for tensor in step.input:
            entry.input_map[tensor.name] = inner.get(tensor.name, wire.inputs.get(tensor.name, tensor.name))
        read_later = {t.name for later in steps[i + 1 :] for t in later.input}
        for tensor in step.output:
            if tensor.name in read and source[tensor.name] == step.name:
                entry.output_map[tensor.name] = wire.outputs.get(tensor.name, tensor.name)
            elif tensor.name in read_later:
                inner[tensor.name] = entry.output_map[tensor.name] = f"{step.name}.{tensor.name}"
    return config


def render(config: mc.ModelConfig) -> str:
    return text_format.MessageToString(config)


def parse(text: str) -> mc.ModelConfig:
    return text_format.Parse(text, mc.ModelConfig())
