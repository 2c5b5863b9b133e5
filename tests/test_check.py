"""`ernie-deploy check`: a built repository checks clean, and each way of breaking it is named."""

from __future__ import annotations

import shutil

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from ernie_deploy.cli import main
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.core.tasks import MODEL_INPUTS, SEQ_CLS, TOKEN_CLS, TOKENIZER_STEP
from ernie_deploy.repository import check
from ernie_deploy.repository.build import build
from ernie_deploy.repository.check import check_repository
from ernie_deploy.repository.configs import parse, render
from ernie_deploy.repository.options import BuildOptions

from .conftest import artifacts

MODEL = ModelSpec.new(SEQ_CLS).model_step
POST = ModelSpec.new(SEQ_CLS).postprocess_step
ENSEMBLE = ModelSpec.new(SEQ_CLS).name
TOKEN_MODEL = ModelSpec.new(TOKEN_CLS).model_step


@pytest.fixture(scope="module")
def built(tmp_path_factory, tiny_pipeline, tiny_token_pipeline):
    """runtime -> a repository of both tiny tasks."""
    entries = [artifacts(p) for p in (tiny_pipeline, tiny_token_pipeline)]
    repos = {}
    for runtime in ("python", "onnxruntime"):
        repos[runtime] = tmp_path_factory.mktemp(f"check_{runtime}")
        build(entries, repos[runtime], BuildOptions(runtime=runtime, layout="ensemble"))
    return repos


def edit(repo, model, change):
    path = repo / model / "config.pbtxt"
    config = parse(path.read_text(encoding="utf-8"))
    change(config)
    path.write_text(render(config), encoding="utf-8")


def _set_input(field, value):
    def change(config):
        tensor = next(t for t in config.input if t.name == MODEL_INPUTS[0])
        if field == "dims":
            del tensor.dims[:]
            tensor.dims.extend(value)
        else:
            setattr(tensor, field, value)

    return change


def _orphan_read(config):
    step = config.ensemble_scheduling.step[-1]
    step.input_map[next(iter(step.input_map))] = "nowhere"


def _gpu_group(config):
    config.instance_group[0].kind = mc.ModelInstanceGroup.KIND_GPU


def _break_model_py(repo):
    (repo / POST / "1" / "model.py").write_text("class TritonPythonModel(:\n", encoding="utf-8")


# name -> (breaks a copy of the repository, the model reported, a part of the message)
BREAKS = {
    "renamed config": (
        lambda r: edit(r, POST, lambda c: setattr(c, "name", "other")),
        POST,
        "config name 'other' differs from the folder name",
    ),
    "missing version": (lambda r: shutil.rmtree(r / ENSEMBLE / "1"), ENSEMBLE, "no numeric version folder"),
    "renamed input": (lambda r: edit(r, MODEL, _set_input("name", "ids")), MODEL, "input 'ids' is not in model.onnx"),
    "wrong data type": (
        lambda r: edit(r, MODEL, _set_input("data_type", mc.TYPE_INT32)),
        MODEL,
        f"input '{MODEL_INPUTS[0]}' is INT32 in config.pbtxt but INT64 in model.onnx",
    ),
    "batch axis in dims": (
        lambda r: edit(r, MODEL, _set_input("dims", [-1, -1])),
        MODEL,
        "include the batch dimension; with max_batch_size > 0 it must be left out",
    ),
    "orphan ensemble read": (
        lambda r: edit(r, ENSEMBLE, _orphan_read),
        ENSEMBLE,
        f"step {POST} reads 'nowhere', which is neither an ensemble input",
    ),
    "missing step model": (
        lambda r: shutil.rmtree(r / POST),
        ENSEMBLE,
        f"step model '{POST}' is not in the repository",
    ),
    "KIND_GPU without a GPU": (
        lambda r: edit(r, TOKENIZER_STEP, _gpu_group),
        TOKENIZER_STEP,
        "KIND_GPU instance group on a machine with no GPU",
    ),
    "model.py syntax error": (_break_model_py, POST, "1/model.py does not compile"),
    "missing warmup file": (
        lambda r: (r / TOKENIZER_STEP / "warmup" / "text").unlink(),
        TOKENIZER_STEP,
        "warmup/text is missing",
    ),
}


@pytest.fixture(autouse=True)
def no_gpu(monkeypatch):
    monkeypatch.setattr(check, "gpu_count", lambda: 0)


@pytest.mark.parametrize("runtime", ["python", "onnxruntime"])
def test_built_repository_checks_clean(built, runtime, capsys):
    assert check_repository(built[runtime]) == []
    assert main(["check", "-r", str(built[runtime])]) == 0
    lines = capsys.readouterr().out.strip().splitlines()  # what each model serves with, then the verdict
    assert "ernie_tokencls: NER decoding constrained" in lines and lines[-1] == "ok: 7 models checked"
    assert "ernie_seqcls: seq_cls model, layout ensemble, long texts: head" in lines, lines


def test_fused_repository_checks_clean(tmp_path, tiny_pipeline):
    # the fused model carries model_file too, but its tensors are the pipeline's, not the ONNX file's
    build(
        artifacts(tiny_pipeline),
        tmp_path,
        BuildOptions(runtime="python", layout="fused"),
    )
    assert check_repository(tmp_path) == []


@pytest.mark.parametrize("runtime", ["python", "onnxruntime"])
@pytest.mark.parametrize("how", list(BREAKS))
def test_each_break_is_named(built, runtime, how, tmp_path, capsys):
    repo = tmp_path / "models"
    shutil.copytree(built[runtime], repo)
    breaker, model, message = BREAKS[how]
    breaker(repo)
    problems = check_repository(repo)
    assert any(p.model == model and message in p.message for p in problems), problems
    assert main(["check", "-r", str(repo)]) == 2
    out = capsys.readouterr()
    line = next(str(p) for p in problems if p.model == model and message in p.message)
    assert line in out.out.splitlines() and "(fix: " in line
    assert "ernie-deploy check: error:" in out.err


def test_gpu_group_is_fine_on_a_gpu_machine(built, tmp_path, monkeypatch):
    repo = tmp_path / "models"
    shutil.copytree(built["python"], repo)
    edit(repo, TOKENIZER_STEP, _gpu_group)
    monkeypatch.setattr(check, "gpu_count", lambda: 1)
    assert check_repository(repo) == []


def test_token_model_logits_dims_are_checked(built, tmp_path):
    repo = tmp_path / "models"
    shutil.copytree(built["onnxruntime"], repo)
    edit(repo, TOKEN_MODEL, lambda c: c.output[0].dims.append(3))
    problems = check_repository(repo)
    assert any(p.model == TOKEN_MODEL and "do not fit model.onnx's" in p.message for p in problems)
