"""ORT-backend and GPU build options (`build --ort-graph-level/--ort-inter-op-threads/--device/--trt-fp16`) and
`convert --fp16`: what reaches config.pbtxt, which combinations are refused, `ernie-deploy check` on every
layout, and the FP16 model's signature and drift from FP32 on the tiny models (CPU). GPU-only checks skip
without a CUDA-capable onnxruntime."""

from __future__ import annotations

import json
import shutil

import numpy as np
import onnx
import pytest
from tritonclient.grpc import model_config_pb2 as mc

from ernie_deploy.cli import main
from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.core.tasks import LOGITS, MODEL_INPUTS, SEQ_CLS, TOKEN_CLS
from ernie_deploy.export.drift import check_drift, require_drift
from ernie_deploy.export.gates import DEFAULT_FP16_TOLERANCE, Gates, counted, within
from ernie_deploy.export.precision import convert_fp16
from ernie_deploy.repository import check
from ernie_deploy.repository.build import build
from ernie_deploy.repository.check import check_repository
from ernie_deploy.repository.configs import parse, render
from ernie_deploy.repository.layouts import task_configs
from ernie_deploy.repository.options import BuildOptions
from ernie_deploy.repository.resolve import resolve_options
from ernie_deploy.repository.signature import onnx_signature

from .conftest import PARITY_TEXTS, artifacts, assert_refused_convert_changes_nothing, io_signature

TEXTS = PARITY_TEXTS
KIND_CPU, KIND_GPU = mc.ModelInstanceGroup.KIND_CPU, mc.ModelInstanceGroup.KIND_GPU
ENSEMBLE = {"runtime": "python", "layout": "ensemble"}  # the build these tests read, unless they say otherwise
SEQ_MODEL, TOKEN_MODEL = (ModelSpec.new(task).model_step for task in (SEQ_CLS, TOKEN_CLS))


def configs(pipeline, **options) -> list[mc.ModelConfig]:
    """The task's configs as Triton reads them back from config.pbtxt."""
    return [
        parse(render(c))
        for c in task_configs(
            resolve_options(pipeline.static.spec, BuildOptions(**{**ENSEMBLE, **options})), pipeline.onnx
        )
    ]


def model_step(pipeline, **options) -> mc.ModelConfig:
    return configs(pipeline, **options)[1]


# -- build options -> config.pbtxt ------------------------------------------------------------------------------


@pytest.mark.parametrize("name, level", [("extended", 1), ("basic", -1), ("disabled", 2)])
def test_graph_level_is_the_ort_backends_number(tiny_pipeline, name, level):
    config = model_step(tiny_pipeline, runtime="onnxruntime", ort_graph_level=name)
    assert config.optimization.graph.level == level
    assert f"level: {level}" in render(config)


def test_default_graph_level_writes_no_optimization_block(tiny_pipeline):
    # the backend's default (no block) is ORT_ENABLE_ALL; a written 0 would mean the same, so nothing is written
    config = model_step(tiny_pipeline, runtime="onnxruntime", ort_graph_level="all")
    assert not config.HasField("optimization") and "optimization" not in render(config)


def test_thread_counts_are_the_ort_backends_parameters(tiny_pipeline):
    config = model_step(tiny_pipeline, runtime="onnxruntime", ort_threads=2, ort_inter_op_threads=3)
    params = {k: v.string_value for k, v in config.parameters.items()}
    # inter-op threads are ignored in onnxruntime's sequential mode, so they come with the parallel one
    assert params == {"intra_op_thread_count": "2", "inter_op_thread_count": "3", "execution_mode": "1"}
    plain = model_step(tiny_pipeline, runtime="onnxruntime", ort_threads=2)
    assert {k: v.string_value for k, v in plain.parameters.items()} == {"intra_op_thread_count": "2"}
    assert not model_step(tiny_pipeline, runtime="onnxruntime").parameters


def test_device_gpu_moves_only_the_model_step(tiny_token_pipeline):
    tokenizer, model, post, ensemble = configs(tiny_token_pipeline, runtime="onnxruntime", device="gpu", instances=2)
    assert [(g.kind, g.count) for g in model.instance_group] == [(KIND_GPU, 2)]
    assert [g.kind for c in (tokenizer, post) for g in c.instance_group] == [KIND_CPU, KIND_CPU]
    assert not ensemble.instance_group
    assert not model.optimization.execution_accelerators.gpu_execution_accelerator  # CUDA, no TensorRT
    cpu = model_step(tiny_token_pipeline, runtime="onnxruntime")
    assert [g.kind for g in cpu.instance_group] == [KIND_CPU]


def test_trt_fp16_is_the_tensorrt_accelerator(tiny_pipeline):
    config = model_step(tiny_pipeline, runtime="onnxruntime", device="gpu", trt_fp16=True, ort_graph_level="basic")
    (accelerator,) = config.optimization.execution_accelerators.gpu_execution_accelerator
    assert accelerator.name == "tensorrt" and dict(accelerator.parameters) == {"precision_mode": "FP16"}
    assert not config.optimization.execution_accelerators.cpu_execution_accelerator
    assert config.optimization.graph.level == -1  # both live in the one optimization block
    assert [g.kind for g in config.instance_group] == [KIND_GPU]


def test_gpu_options_leave_the_tensors_alone(tiny_pipeline):
    cpu = configs(tiny_pipeline, runtime="onnxruntime")
    gpu = configs(tiny_pipeline, runtime="onnxruntime", device="gpu", trt_fp16=True, ort_inter_op_threads=2)
    for a, b in zip(cpu, gpu):
        assert (list(a.input), list(a.output), list(a.model_warmup)) == (
            list(b.input),
            list(b.output),
            list(b.model_warmup),
        )


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(runtime="python", device="gpu"), "--device gpu needs the ONNX Runtime backend"),
        (dict(runtime="python", device="gpu", layout="fused"), "--device gpu needs the ONNX Runtime backend"),
        (dict(runtime="onnxruntime", trt_fp16=True), "--trt-fp16 is a GPU execution accelerator"),
        (dict(runtime="python", trt_fp16=True), "--trt-fp16 is a GPU execution accelerator"),
        (dict(runtime="python", ort_graph_level="basic"), "--ort-graph-level configure"),
        (dict(runtime="python", ort_inter_op_threads=2), "--ort-inter-op-threads configure"),
        (dict(runtime="onnxruntime", device="tpu"), "unknown device 'tpu'"),
        (dict(runtime="onnxruntime", ort_graph_level="max"), "unknown ORT graph optimization level 'max'"),
        (dict(runtime="onnxruntime", ort_inter_op_threads=-1), "cannot be negative"),
        (dict(max_queue_size=-1), "--max-queue-size and --queue-timeout-us cannot be negative"),
        (dict(classic=True, queue_timeout_us=1000), "--classic has no dynamic batcher"),
    ],
)
def test_refused_combinations_name_the_fix(tiny_pipeline, options, message):
    with pytest.raises(ErnieDeployError, match=message) as caught:
        task_configs(
            resolve_options(tiny_pipeline.static.spec, BuildOptions(**{**ENSEMBLE, **options})), tiny_pipeline.onnx
        )
    assert caught.value.fix


def test_cli_choices_are_the_levels_build_knows():
    from ernie_deploy.cli import build, build_parser
    from ernie_deploy.repository.options import ORT_GRAPH_LEVELS

    build_cmd = next(a for a in build_parser()._subparsers._group_actions if a.dest == "command").choices["build"]
    (level,) = [a for a in build_cmd._actions if a.dest == "ort_graph_level"]
    # the flag's default is BuildOptions' own, which `build` fills in when the flag is left out
    default = build.options(build_parser().parse_args(["build"])).ort_graph_level
    assert level.choices == list(ORT_GRAPH_LEVELS) and default == "all"


def _build_args(pipeline, repo, *extra):
    return [
        "build",
        "--task",
        pipeline.task.name,
        "--static",
        str(pipeline.static.root),
        "--onnx",
        str(pipeline.onnx),
        "--repository",
        str(repo),
        *extra,
    ]


def test_cli_build_writes_every_gpu_option(tiny_pipeline, tmp_path):
    repo = tmp_path / "models"
    assert (
        main(
            _build_args(
                tiny_pipeline,
                repo,
                "--runtime",
                "onnxruntime",
                "--device",
                "gpu",
                "--trt-fp16",
                "--ort-graph-level",
                "extended",
                "--ort-threads",
                "4",
                "--ort-inter-op-threads",
                "2",
                "--instances",
                "3",
            )
        )
        == 0
    )
    config = parse((repo / SEQ_MODEL / "config.pbtxt").read_text(encoding="utf-8"))
    assert config.platform == "onnxruntime_onnx"
    assert [(g.kind, g.count) for g in config.instance_group] == [(KIND_GPU, 3)]
    assert config.optimization.graph.level == 1
    assert [a.name for a in config.optimization.execution_accelerators.gpu_execution_accelerator] == ["tensorrt"]
    assert {k: v.string_value for k, v in config.parameters.items()} == {
        "intra_op_thread_count": "4",
        "inter_op_thread_count": "2",
        "execution_mode": "1",
    }
    tokenizer = parse((repo / "ernie_tokenizer" / "config.pbtxt").read_text(encoding="utf-8"))
    assert [(g.kind, g.count) for g in tokenizer.instance_group] == [(KIND_CPU, 3)]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--runtime", "python", "--device", "gpu"], "--runtime onnxruntime --device gpu"),
        (["--runtime", "onnxruntime", "--trt-fp16"], "--trt-fp16"),
        (["--runtime", "python", "--ort-graph-level", "basic"], "--runtime onnxruntime"),
    ],
)
def test_cli_build_refuses_before_writing(tiny_pipeline, tmp_path, capsys, extra, message):
    repo = tmp_path / "models"
    assert main(_build_args(tiny_pipeline, repo, *extra)) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "fix:" in err and message in err and "Traceback" not in err
    assert not repo.exists()


# -- convert --fp16 ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=["tiny_pipeline", "tiny_token_pipeline"])
def fp16(request, tmp_path_factory):
    """(pipeline, FP16 path, convert_fp16's summary) for both tiny models."""
    pipeline = request.getfixturevalue(request.param)
    out = tmp_path_factory.mktemp("fp16") / "model.onnx"
    return pipeline, out, convert_fp16(pipeline.onnx, out)


def test_fp16_keeps_names_dtypes_and_dims(fp16):
    pipeline, out, _ = fp16
    inputs, outputs = io_signature(out)
    assert (inputs, outputs) == io_signature(pipeline.onnx)
    assert [(name, dtype) for name, dtype, _ in inputs] == [(n, onnx.TensorProto.INT64) for n in MODEL_INPUTS]
    assert [(name, dtype) for name, dtype, _ in outputs] == [(LOGITS, onnx.TensorProto.FLOAT)]
    # so the generated Triton configs are the FP32 model's, byte for byte
    assert onnx_signature(out) == onnx_signature(pipeline.onnx)


def test_every_float_weight_is_fp16(fp16):
    pipeline, out, summary = fp16
    fp32, half = onnx.load(str(pipeline.onnx)), onnx.load(str(out))
    floats = [i for i in fp32.graph.initializer if i.data_type == onnx.TensorProto.FLOAT]
    halves = [i for i in half.graph.initializer if i.data_type == onnx.TensorProto.FLOAT16]
    assert summary == {"fp16_initializers": len(halves), "fp32_initializers": 0}
    assert sum(int(np.prod(i.dims)) for i in halves) == sum(int(np.prod(i.dims)) for i in floats) > 5_000
    assert out.stat().st_size < 0.7 * pipeline.onnx.stat().st_size


def test_fp16_runs_on_cpu_within_tolerance_of_fp32(fp16):
    from ernie_deploy.serving.encoding import encode_batch
    from ernie_deploy.serving.runtime import OnnxModel
    from ernie_deploy.serving.tokenizer import build_tokenizer

    pipeline, out, _ = fp16
    enc = encode_batch(build_tokenizer(pipeline.static.vocab_file), TEXTS, 128)
    logits = OnnxModel(out)(enc.input_ids, enc.token_type_ids)
    assert logits.dtype == np.float32 and logits.shape[0] == len(TEXTS) and np.isfinite(logits).all()
    static = pipeline.static
    report = check_drift("fp16", static.spec, static.vocab_file, pipeline.onnx, out, TEXTS)
    assert report.ok and report.n == len(TEXTS), report
    assert 0 < report.max_abs_diff < DEFAULT_FP16_TOLERANCE, report  # reduced (not bit-identical), but close
    assert report.labels_agree == 1.0 and report.token_labels_agree in (None, 1.0), report


def test_fp16_gate_fails_past_its_tolerance(fp16):
    pipeline, out, _ = fp16
    record, vocab = pipeline.static.spec, pipeline.static.vocab_file
    tight = check_drift("fp16", record, vocab, pipeline.onnx, out, TEXTS, gates=Gates(fp16_tolerance=0.0))
    assert not tight.ok and tight.to_dict()["ok"] is False
    with pytest.raises(ErnieDeployError, match="drifts from FP32") as caught:
        require_drift(tight, out)
    assert "convert without --fp16" in caught.value.fix
    assert not check_drift("fp16", record, vocab, pipeline.onnx, out, TEXTS, gates=Gates(fp16_min_agree=1.01)).ok


def test_unreadable_input_is_refused(tmp_path):
    bad = tmp_path / "model.onnx"
    bad.write_bytes(b"not an onnx model")
    for source in (bad, tmp_path / "missing.onnx"):
        with pytest.raises(ErnieDeployError, match="is not a readable ONNX model"):
            convert_fp16(source, tmp_path / "out" / "model.onnx")
    assert not (tmp_path / "out").exists()


def _copy_with(change):
    """A stand-in for paddle2onnx's converter that writes the FP32 model after `change`."""

    def converter(src, dst, verbose):
        model = onnx.load(src)
        change(model)
        onnx.save(model, dst)

    return converter


def _garbage(src, dst, verbose):
    with open(dst, "wb") as fh:  # what the real binding does with an input it cannot read
        fh.write(b"\x00garbage")


def _int32_ids(model):
    model.graph.input[0].type.tensor_type.elem_type = onnx.TensorProto.INT32


@pytest.mark.parametrize(
    "converter, message",
    [
        (_garbage, "produced no valid model"),
        (lambda src, dst, verbose: None, "produced no valid model"),  # logged a failure, wrote nothing
        (_copy_with(lambda model: None), "holds no FP16 weights"),
        (_copy_with(_int32_ids), "changed the graph's inputs/outputs"),
    ],
)
def test_a_bad_conversion_is_refused_and_nothing_left(tiny_pipeline, tmp_path, monkeypatch, converter, message):
    import paddle2onnx.paddle2onnx_cpp2py_export as binding

    monkeypatch.setattr(binding, "convert_to_fp16", converter)
    out = tmp_path / "out" / "model.onnx"
    with pytest.raises(ErnieDeployError, match=message) as caught:
        convert_fp16(tiny_pipeline.onnx, out)
    assert "convert without --fp16" in caught.value.fix
    assert list(out.parent.iterdir()) == []


def test_cli_convert_fp16_keeps_fp32_beside_and_reports_drift(tiny_token_pipeline, tmp_path, capsys):
    parity = tmp_path / "parity.jsonl"
    parity.write_text(
        "".join(json.dumps({"text": t, "labels": ["O"] * len(t)}, ensure_ascii=False) + "\n" for t in TEXTS),
        encoding="utf-8",
    )
    out = tmp_path / "onnx" / "model.onnx"
    common = [
        "convert",
        "--task",
        "token_cls",
        "--static",
        str(tiny_token_pipeline.static.root),
        "--out",
        str(out),
        "--parity-data",
        str(parity),
    ]
    assert main([*common, "--fp16"]) == 0
    assert sorted(p.name for p in out.parent.iterdir()) == [
        "model.fp32.onnx",
        "model.json",
        "model.onnx",
        "parity.json",
    ]
    assert json.loads((out.parent / "model.json").read_text())["precision"] == "fp16"  # recorded with it
    dtypes = {i.data_type for i in onnx.load(str(out)).graph.initializer}
    assert onnx.TensorProto.FLOAT16 in dtypes and onnx.TensorProto.FLOAT not in dtypes
    assert onnx.TensorProto.FLOAT16 not in {
        i.data_type for i in onnx.load(str(out.parent / "model.fp32.onnx")).graph.initializer
    }
    report = json.loads((out.parent / "parity.json").read_text())
    assert report["ok"] and report["max_abs_diff"] < 1e-4 and report["n"] == len(TEXTS)  # Paddle vs FP32
    drift = report["fp16"]
    assert drift["ok"] and drift["n"] == len(TEXTS) and drift["tolerance"] == DEFAULT_FP16_TOLERANCE
    assert 0 < drift["max_abs_diff"] < DEFAULT_FP16_TOLERANCE and drift["token_labels_agree"] == 1.0
    assert drift["fp16_initializers"] > 0
    assert "FP16 vs FP32" in capsys.readouterr().out

    # An FP16 model that fails its gate changes nothing; the refused run's report is kept aside.
    assert_refused_convert_changes_nothing([*common, "--fp16", "--fp16-tolerance", "0"], out, "fp16", capsys)

    # Back to FP32: the FP16 leftovers go, model.onnx is the FP32 model again.
    assert main(common) == 0
    assert sorted(p.name for p in out.parent.iterdir()) == ["model.json", "model.onnx", "parity.json"]
    assert json.loads((out.parent / "model.json").read_text())["precision"] == "fp32"
    assert "fp16" not in json.loads((out.parent / "parity.json").read_text())
    assert onnx.TensorProto.FLOAT16 not in {i.data_type for i in onnx.load(str(out)).graph.initializer}


def test_cli_convert_refuses_fp16_with_int8(tiny_pipeline, tmp_path, capsys):
    out = tmp_path / "onnx" / "model.onnx"
    assert (
        main(["convert", "--static", str(tiny_pipeline.static.root), "--out", str(out), "--fp16", "--quantize", "int8"])
        == 2
    )
    err = capsys.readouterr().err
    assert "--fp16 and --quantize int8" in err and "fix: choose one" in err
    assert not out.parent.exists()


# -- ernie-deploy check on every layout -------------------------------------------------------------------------

LAYOUTS = {
    "cpu": dict(runtime="onnxruntime"),
    "cpu_tuned": dict(runtime="onnxruntime", ort_graph_level="disabled", ort_threads=1, ort_inter_op_threads=2),
    "gpu": dict(runtime="onnxruntime", device="gpu", instances=2),
    "gpu_trt": dict(runtime="onnxruntime", device="gpu", trt_fp16=True, ort_graph_level="basic"),
    "gpu_trt_fp16_model": dict(runtime="onnxruntime", device="gpu", trt_fp16=True),
    "python_fp16_model": dict(runtime="python"),
}


@pytest.fixture(scope="module")
def layouts(tmp_path_factory, tiny_pipeline, tiny_token_pipeline):
    """layout name -> a repository of both tiny tasks built with its options (FP16 models where named)."""
    repos = {}
    for name, options in LAYOUTS.items():
        entries = []
        for pipeline in (tiny_pipeline, tiny_token_pipeline):
            model = pipeline.onnx
            if "fp16_model" in name:
                model = tmp_path_factory.mktemp("fp16_model") / "model.onnx"
                convert_fp16(pipeline.onnx, model)
            entries.append(artifacts(pipeline, onnx=model))
        repos[name] = tmp_path_factory.mktemp(name)
        build(entries, repos[name], BuildOptions(**{**ENSEMBLE, **options}))
    return repos


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_every_layout_checks_clean_on_a_gpu_machine(layouts, name, monkeypatch, capsys):
    monkeypatch.setattr(check, "gpu_count", lambda: 1)
    served = onnx.load(str(layouts[name] / SEQ_MODEL / "1" / "model.onnx"))
    assert (onnx.TensorProto.FLOAT16 in {i.data_type for i in served.graph.initializer}) == ("fp16_model" in name)
    assert check_repository(layouts[name]) == []
    assert main(["check", "-r", str(layouts[name])]) == 0
    assert "ok: 7 models checked" in capsys.readouterr().out


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_without_a_gpu_only_gpu_model_steps_are_flagged(layouts, name, monkeypatch, capsys):
    monkeypatch.setattr(check, "gpu_count", lambda: 0)
    problems = check_repository(layouts[name])
    if LAYOUTS[name].get("device") != "gpu":
        assert problems == [] and main(["check", "-r", str(layouts[name])]) == 0
        return
    # exactly one line per model step, none for the CPU steps, and the fix names the build flag
    assert sorted(p.model for p in problems) == sorted([SEQ_MODEL, TOKEN_MODEL])
    assert all(p.message == "KIND_GPU instance group on a machine with no GPU" for p in problems)
    assert all("build --device cpu" in p.fix for p in problems)
    assert main(["check", "-r", str(layouts[name])]) == 2
    assert "2 problem(s)" in capsys.readouterr().err


def _edit(repo, model, change):
    path = repo / model / "config.pbtxt"
    config = parse(path.read_text(encoding="utf-8"))
    change(config)
    path.write_text(render(config), encoding="utf-8")


def test_check_names_ort_options_the_backend_would_ignore(layouts, tmp_path, monkeypatch):
    monkeypatch.setattr(check, "gpu_count", lambda: 1)
    repo = tmp_path / "repo"
    shutil.copytree(layouts["gpu_trt"], repo)

    def to_cpu(config):
        config.instance_group[0].kind = KIND_CPU

    def odd_level(config):
        config.optimization.graph.level = 3

    _edit(repo, SEQ_MODEL, to_cpu)
    _edit(repo, TOKEN_MODEL, odd_level)
    found = {(p.model, p.message.split(":")[0]) for p in check_repository(repo)}
    assert found == {
        (SEQ_MODEL, "gpu_execution_accelerator ['tensorrt'] is ignored"),
        (
            TOKEN_MODEL,
            "optimization graph level 3 is not one the ORT backend knows (it runs all optimizations instead)",
        ),
    }


# -- on a GPU ---------------------------------------------------------------------------------------------------


def _cuda_provider() -> bool:
    import onnxruntime as ort

    return "CUDAExecutionProvider" in ort.get_available_providers()


@pytest.mark.skipif(
    not _cuda_provider(),
    reason="onnxruntime here has no CUDAExecutionProvider (the CPU wheel is "
    "pinned; install onnxruntime-gpu on a GPU machine to run this)",
)
def test_fp16_model_on_cuda_agrees_with_fp32_on_cpu(fp16):
    import onnxruntime as ort

    from ernie_deploy.serving.encoding import encode_batch
    from ernie_deploy.serving.tokenizer import build_tokenizer

    pipeline, out, _ = fp16
    enc = encode_batch(build_tokenizer(pipeline.static.vocab_file), TEXTS, 128)
    feeds = {"input_ids": enc.input_ids.astype(np.int64), "token_type_ids": enc.token_type_ids.astype(np.int64)}
    cuda = ort.InferenceSession(str(out), providers=["CUDAExecutionProvider"])
    assert cuda.get_providers()[0] == "CUDAExecutionProvider"
    cpu = ort.InferenceSession(str(pipeline.onnx), providers=["CPUExecutionProvider"])
    a, b = cpu.run([LOGITS], feeds)[0], cuda.run([LOGITS], feeds)[0]
    real = enc.attention_mask.astype(bool)
    diff = np.abs(a - b)[real] if a.ndim == 3 else np.abs(a - b)
    assert float(diff.max()) < DEFAULT_FP16_TOLERANCE
    assert ((a.argmax(-1) == b.argmax(-1)) | (~real if a.ndim == 3 else False)).all()


# -- the real models (slow) -------------------------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.parametrize("name", ["seq_cls_pipeline", "token_cls_pipeline"])
def test_fp16_costs_at_most_a_tenth_of_a_point_on_the_test_split(name, request, tmp_path):
    """FP32 vs FP16 (onnxruntime on CPU) on the whole test split, scored the way `ernie-deploy eval` scores."""
    from ernie_deploy.evaluate.metrics import score
    from ernie_deploy.evaluate.offline import onnx_predictions
    from ernie_deploy.fetch.data import read_split_file, split_file

    pipeline = request.getfixturevalue(name)
    task, static = pipeline.task, pipeline.static
    half = tmp_path / "model.onnx"
    convert_fp16(pipeline.onnx, half)
    texts, gold = read_split_file(split_file(pipeline.data, "test", task.split_format))
    report = check_drift("fp16", static.spec, static.vocab_file, pipeline.onnx, half, texts[:256])
    assert report.ok, report
    reports = {}
    for kind, path in (("fp32", pipeline.onnx), ("fp16", half)):
        predicted = onnx_predictions(static.spec, path, static.vocab_file, texts)
        reports[kind] = score(task, texts, gold, predicted, static.labels)
    scores = {kind: r[task.metric] for kind, r in reports.items()}
    print(f"{task.name} {task.metric}: FP32 {scores['fp32']:.4f}  FP16 {scores['fp16']:.4f}")
    assert scores["fp32"] > (0.7 if task.metric == "accuracy" else 0.5), scores
    # A tenth of a point: on 1,000 texts' accuracy at most 1 text changed (a count); on F1, 0.001 and float rounding.
    assert within(scores["fp16"], scores["fp32"], 0.001, n=counted(reports["fp32"])), scores


def test_a_queue_bound_rejects_on_every_batching_step(tiny_pipeline):
    """--max-queue-size / --queue-timeout-us: each step with a dynamic batcher refuses past the bound; the ensemble,
    which has no queue of its own, carries none."""
    from tritonclient.grpc import model_config_pb2 as mc

    configs = task_configs(
        resolve_options(
            tiny_pipeline.static.spec,
            BuildOptions(runtime="python", layout="ensemble", max_queue_size=48, queue_timeout_us=20000),
        ),
        tiny_pipeline.onnx,
    )
    for config in configs[:-1]:
        policy = config.dynamic_batching.default_queue_policy
        assert (policy.max_queue_size, policy.default_timeout_microseconds) == (48, 20000), config.name
        assert policy.timeout_action == mc.ModelQueuePolicy.REJECT
    assert not configs[-1].HasField("dynamic_batching")
    plain = task_configs(
        resolve_options(tiny_pipeline.static.spec, BuildOptions(runtime="python", layout="ensemble")),
        tiny_pipeline.onnx,
    )
    assert not any(c.dynamic_batching.HasField("default_queue_policy") for c in plain)
