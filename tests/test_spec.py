"""The model record (core.spec.ModelSpec): one record per model, written by export, completed by convert and build,
recorded on the served model and read back by the tools that see only a repository; a flag given to build overrides a
field and is then recorded. The default window follows the lengths the model was trained on."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest

from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.spec import SPEC_FILE, ModelSpec
from ernie_deploy.core.tasks import DEMO_MODELS, SEQ_CLS, TOKEN_CLS


def _spec(**changes) -> ModelSpec:
    return replace(ModelSpec("news", "seq_cls", ("a", "b"), 128), **changes)


def test_the_record_round_trips_and_refuses_what_it_does_not_know(tmp_path):
    spec = _spec(trained_tokens=30, layout="fused", serving={"instances": 2})
    spec.write(tmp_path)
    assert ModelSpec.read(tmp_path) == spec
    assert ModelSpec.from_json(spec.to_json()) == spec
    data = json.loads((tmp_path / SPEC_FILE).read_text())
    with pytest.raises(ErnieDeployError, match="unknown fields colour") as caught:
        ModelSpec.from_dict({**data, "colour": "red"})
    assert caught.value.fix
    with pytest.raises(ErnieDeployError, match="missing fields labels"):
        ModelSpec.from_dict({k: v for k, v in data.items() if k != "labels"})
    with pytest.raises(ErnieDeployError, match="record format 99"):
        ModelSpec.from_dict({**data, "format": 99})
    with pytest.raises(ErnieDeployError, match="not usable"):
        _spec(name="1 bad name")
    with pytest.raises(ErnieDeployError, match="unknown task"):
        _spec(task="translation")
    (tmp_path / SPEC_FILE).write_text("{not json")
    with pytest.raises(ErnieDeployError, match="is not JSON"):
        ModelSpec.read(tmp_path)


def test_the_record_gives_its_task_and_holds_the_models_own_facts():
    spec = _spec(max_seq_len=64)
    assert (spec.task_spec.name, spec.name, spec.max_seq_len) == ("seq_cls", "news", 64)
    assert spec.task_spec is SEQ_CLS and ModelSpec("ernie_seqcls", "seq_cls", (), 128).task_spec is SEQ_CLS


@pytest.mark.parametrize("trained, window", [(None, 128), (28, 28), (500, 128), (1, 3)])
def test_the_default_window_is_the_trained_length_within_what_a_window_can_be(trained, window):
    assert _spec(trained_tokens=trained).window_default == window


def test_the_recorded_length_is_what_three_in_four_training_texts_reach():
    from ernie_deploy.train.rows import length_record

    record = length_record([10] * 25 + [20] * 50 + [90] * 25)
    assert record["trained_tokens"] == 10 and record["trained_token_lengths"] == {
        "p25": 10,
        "p50": 20,
        "p90": 90,
        "max": 90,
    }
    assert length_record([]) == {}


def test_export_records_the_trained_length_and_build_serves_windows_of_it(tiny_token_pipeline, tmp_path, capsys):
    """Through the commands: the checkpoint's training record -> export's model.json -> convert's -> the windows
    `build` serves and records; --window-size overrides the record and is recorded in its place."""
    from ernie_deploy.cli import main
    from ernie_deploy.repository.configs import parse
    from ernie_deploy.repository.served import served_models

    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(tiny_token_pipeline.checkpoint, checkpoint)
    (checkpoint / "bootstrap.json").write_text(json.dumps({"trained_tokens": 20}))
    artifacts = tmp_path / "artifacts"
    static, onnx, repo = artifacts / "static", artifacts / "onnx" / "model.onnx", tmp_path / "models"
    common = ["--model", "people"]
    assert main(["export", "--task", "token_cls", "--checkpoint", str(checkpoint), "--out", str(static), *common]) == 0
    assert ModelSpec.read(static).trained_tokens == 20 and ModelSpec.read(static).name == "people"
    assert main(["convert", "--static", str(static), "--out", str(onnx), "--skip-parity", *common]) == 0
    assert ModelSpec.read(onnx.parent).precision == "fp32"
    build = ["build", "--static", str(static), "--onnx", str(onnx), "--repository", str(repo), "--runtime", "python"]
    assert main([*build, *common]) == 0
    served = served_models(repo)["people"]
    assert (served.long_text, served.window_size, served.window_stride, served.layout) == ("window", 20, 9, "fused")
    assert (served.trained_tokens, served.precision, served.name) == (20, "fp32", "people")
    fused = parse((repo / "people" / "config.pbtxt").read_text())  # the default layout on the python step
    assert fused.parameters["window_size"].string_value == "20"
    assert main([*build, *common, "--window-size", "40"]) == 0  # the flag overrides the record, and is recorded
    assert served_models(repo)["people"].window_size == 40
    capsys.readouterr()


def test_a_checkpoint_that_records_nothing_reads_in_windows_of_max_seq_len(tiny_token_pipeline, tmp_path):
    from ernie_deploy.repository.build import build, model_artifacts
    from ernie_deploy.repository.options import BuildOptions
    from ernie_deploy.repository.served import served_models

    p = tiny_token_pipeline
    assert p.static.spec.trained_tokens is None
    build(model_artifacts(p.static, p.onnx), tmp_path, BuildOptions(runtime="python", layout="ensemble"))
    served = served_models(tmp_path)[DEMO_MODELS[TOKEN_CLS.name]]
    assert served.window_size == p.static.spec.max_seq_len and served.tokenizer_sha256
