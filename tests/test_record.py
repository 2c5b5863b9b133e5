"""One model object: the record (core.spec.ModelSpec) is what the code passes and what every served parameter is
generated from; a task (core.tasks.TaskSpec) holds what its kind decides and no model's facts; a repository of an
earlier record format is refused by name with the command that rebuilds it, never read through fallbacks."""

from __future__ import annotations

import json
from dataclasses import fields, replace
from pathlib import Path

import pytest

from ernie_deploy.core.errors import BadRepositoryError, ErnieDeployError
from ernie_deploy.core.spec import FORMAT, REBUILD, SPEC_PARAMETER, ModelSpec, OldRecord
from ernie_deploy.core.tasks import DEMO_MODELS, SEQ_CLS, TASKS, TOKEN_CLS, TaskSpec

MODEL_FACTS = ("ensemble", "max_seq_len", "named", "model_step", "postprocess_step", "artifact_name")


@pytest.mark.parametrize("task", list(TASKS.values()), ids=list(TASKS))
def test_a_task_holds_no_model_facts_and_the_record_holds_them(task: TaskSpec):
    assert not [fact for fact in MODEL_FACTS if hasattr(task, fact)]
    model = ModelSpec.new(task, "news")
    assert model.task_spec is task
    assert (model.model_step, model.postprocess_step, model.artifact_name) == ("news_model", "news_postprocess", "news")
    demo = ModelSpec.new(task)
    assert demo.name == DEMO_MODELS[task.name] and demo.artifact_name == task.name


def test_a_record_of_another_format_is_refused_with_the_rebuild_command():
    data = ModelSpec.new(SEQ_CLS, labels=("a", "b")).to_dict()
    assert data["format"] == FORMAT == 3
    for old in ({**data, "format": 2}, {**data, "format": 1}, {k: v for k, v in data.items() if k != "format"}):
        with pytest.raises(OldRecord) as caught:
            ModelSpec.from_dict(old)
        assert isinstance(caught.value, BadRepositoryError) and REBUILD in caught.value.fix


def _record_values(model: ModelSpec) -> dict[str, object]:
    """Every record field by name, and the build options it keeps under `serving`."""
    values = {f.name: getattr(model, f.name) for f in fields(ModelSpec) if f.name != "serving"}
    return {**model.serving.to_dict(), **values}


def _served_parameters(repository: Path, name: str) -> dict[str, dict[str, str]]:
    """Each Triton model that served model `name` is made of -> its config parameters."""
    from ernie_deploy.repository.served import Existing

    existing = Existing.read(repository)
    return {
        member: {key: value.string_value for key, value in existing.configs[member].parameters.items()}
        for member in sorted(existing.members(name))
    }


@pytest.mark.integration
@pytest.mark.parametrize("layout", ["fused", "ensemble", "tokenizer-in-model"])
def test_every_served_parameter_named_like_a_record_field_has_its_value(
    layout, tiny_pipeline, tiny_token_pipeline, tmp_path
):
    """One name, one meaning: a config parameter that shares a name with a field of the model's record (or with a
    build option the record keeps) carries exactly that field's value, and a field the record leaves empty (a
    classifier's windows) is no parameter of the model's own configs. A tokenizer step that models of both readings
    share (the ensemble's) holds the windows of the models that read them, each model's record saying the same."""
    from ernie_deploy.repository.build import ModelArtifacts, build
    from ernie_deploy.repository.options import BuildOptions
    from ernie_deploy.repository.served import served_models

    entries = [
        ModelArtifacts(replace(p.static.spec, name=name), p.onnx, p.static.vocab_file)
        for p, name in ((tiny_pipeline, "news"), (tiny_token_pipeline, "people"))
    ]
    build(entries, tmp_path, BuildOptions(runtime="python", layout=layout))
    records = served_models(tmp_path)
    assert set(records) == {"news", "people"}
    members = {name: _served_parameters(tmp_path, name) for name in records}
    users = {member: {n for n in records if member in members[n]} for n in records for member in members[n]}
    checked = 0
    for name, model in records.items():
        values = _record_values(model)
        for member, parameters in members[name].items():
            for key in sorted(set(parameters) & set(values)):
                if values[key] is None:
                    # not this model's setting: a shared step's, for the other models that use it
                    others = [_record_values(records[n])[key] for n in users[member] - {name}]
                    assert others, f"{member}: parameter {key} is set, but {name}'s record has none"
                    continue
                want = str(values[key]).lower() if isinstance(values[key], bool) else str(values[key])
                assert parameters[key] == want, f"{member}: {key}={parameters[key]!r}, record of {name}: {want!r}"
                checked += 1
    assert checked >= 6  # max_seq_len, layout, long_text and ner_decoding at least, and something of each model
    own = [p for member, p in members["news"].items() if users[member] == {"news"}]
    assert own and not any("window_stride" in p or "window_size" in p for p in own)
    assert records["news"].window_stride is None and records["people"].window_stride is not None


def _rewrite_record(config: Path, change) -> None:
    from ernie_deploy.repository.configs import parse, render

    entry = parse(config.read_text(encoding="utf-8"))
    change(entry)
    config.write_text(render(entry), encoding="utf-8")


@pytest.mark.integration
def test_an_older_repository_is_named_by_check_and_refused_by_the_tools(tiny_pipeline, tmp_path):
    from ernie_deploy.repository.build import ModelArtifacts, build
    from ernie_deploy.repository.check import check_repository
    from ernie_deploy.repository.options import BuildOptions
    from ernie_deploy.repository.served import served_models
    from ernie_deploy.repository.versions import VersionedModel

    build(
        ModelArtifacts(tiny_pipeline.static.spec, tiny_pipeline.onnx, tiny_pipeline.static.vocab_file),
        tmp_path,
        BuildOptions(runtime="python", layout="fused"),
    )
    name = DEMO_MODELS["seq_cls"]
    config = tmp_path / name / "config.pbtxt"
    assert check_repository(tmp_path) == []

    def format_one(entry):
        record = json.loads(entry.parameters[SPEC_PARAMETER].string_value)
        entry.parameters[SPEC_PARAMETER].string_value = json.dumps({**record, "format": 1})

    _rewrite_record(config, format_one)
    problems = check_repository(tmp_path)
    assert [p.model for p in problems] == [name] and "record format 1" in problems[0].message
    assert REBUILD in problems[0].fix
    with pytest.raises(OldRecord, match="record format 1"):
        served_models(tmp_path)

    def no_record(entry):
        del entry.parameters[SPEC_PARAMETER]

    _rewrite_record(config, no_record)
    problems = check_repository(tmp_path)
    assert [p.model for p in problems] == [name] and "carries no model record" in problems[0].message
    for read in (lambda: served_models(tmp_path), lambda: VersionedModel.read(tmp_path, name)):
        with pytest.raises(OldRecord, match="older ernie-deploy") as caught:
            read()
        assert REBUILD in caught.value.fix


def test_a_tokenizer_without_its_limits_is_refused_not_run_unbounded():
    from ernie_deploy.serving.limits import ReadingLimits

    complete = {"cut_max_text_chars": "5", "cut_max_request_chars": "9", "window_max_text_chars": "3"}
    with pytest.raises(ErnieDeployError, match="window_max_request_chars") as caught:
        ReadingLimits.from_parameters(complete.get)
    assert "ernie-deploy build" in caught.value.fix
    limits = ReadingLimits.from_parameters({**complete, "window_max_request_chars": "4"}.get)
    assert (limits.cut.max_text_chars, limits.windows.max_request_chars) == (5, 4)
    assert set(ReadingLimits().parameters()).isdisjoint(f.name for f in fields(ModelSpec))
    assert TOKEN_CLS.kind_facts.reads_windows and not SEQ_CLS.kind_facts.reads_windows
