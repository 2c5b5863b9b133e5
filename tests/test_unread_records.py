"""A served model's record that cannot be read (of another format, or unreadable) is named with its fix wherever a
tool reads records to show them: `stats` (from the server's configs or a local repository) and the client scripts'
`--all-scores`. The numbers and answers that do not need the record stand without it."""

from __future__ import annotations

import json
from types import SimpleNamespace

from tritonclient.grpc import model_config_pb2 as mc

from ernie_deploy.core.spec import FORMAT, REBUILD, SPEC_PARAMETER, ModelSpec
from ernie_deploy.core.tasks import TASK_PARAMETER

URL = "http://127.0.0.1:8000"


def _record(name: str, **changes) -> str:
    data = ModelSpec.new("seq_cls", name=name, labels=("sports", "finance")).to_dict()
    return json.dumps({**data, **changes})


def _config(name: str, record: str) -> dict:
    return {
        "name": name,
        "platform": "ensemble",
        "ensemble_scheduling": {"step": [{"model_name": f"{name}_model"}]},
        "parameters": {TASK_PARAMETER: {"string_value": "seq_cls"}, SPEC_PARAMETER: {"string_value": record}},
    }


def test_stats_names_a_served_record_of_another_format_and_keeps_the_others():
    from ernie_deploy.server.discover import _from_configs

    configs = {
        "news": _config("news", _record("news")),
        "old": _config("old", _record("old", format=FORMAT - 1)),
        "odd": _config("odd", _record("odd", task="no_such_task")),
    }
    index = [{"name": name, "state": "READY"} for name in configs]
    served = _from_configs(URL, index, configs)
    assert set(served.records) == {"news"}  # the readable record still shows
    assert set(served.steps) == {"news", "old", "odd"}  # and every model's numbers
    assert set(served.unread) == {"old", "odd"}
    notes = "\n".join(served.notes())
    assert f"old's record on {URL} is in record format {FORMAT - 1}" in notes
    assert REBUILD in notes  # the fix: the commands that write it again
    assert "odd: its record is not shown: unknown task 'no_such_task'" in notes


def test_stats_names_a_local_record_it_cannot_read(monkeypatch):
    """Without the admin key the records come from the local repository: an unreadable one is named, and the
    others are kept (not the whole folder's records dropped for one)."""
    from ernie_deploy.cli.stats import local_record
    from ernie_deploy.repository import served
    from ernie_deploy.server.discover import _from_metadata

    def entry(name: str, record: str | None) -> mc.ModelConfig:
        config = mc.ModelConfig(name=name, platform="ensemble")
        config.parameters[TASK_PARAMETER].string_value = "seq_cls"
        if record is not None:
            config.parameters[SPEC_PARAMETER].string_value = record
        return config

    configs = {
        "news": entry("news", _record("news")),
        "old": entry("old", _record("old", format=FORMAT - 1)),
        "bare": entry("bare", None),  # built before records: OldRecord too
    }
    existing = SimpleNamespace(configs=configs, made=lambda: list(configs), steps=lambda name: [name])
    monkeypatch.setattr(served.Existing, "read", classmethod(lambda cls, folder: existing))
    monkeypatch.setattr("pathlib.Path.is_dir", lambda self: True)
    local = local_record("models")
    assert set(local.records) == {"news"} and set(local.unread) == {"old", "bare"}
    meta = {name: {"platform": "ensemble", "inputs": [], "outputs": []} for name in configs}
    notes = "\n".join(_from_metadata(URL, meta, local).notes())
    assert "old: its record is not shown: old's record is in record format" in notes
    assert "bare: its record is not shown: served model 'bare' carries no model record" in notes
    assert notes.count(REBUILD) == 2


def _client(record: str):
    config = mc.ModelConfig(name="news")
    config.parameters[SPEC_PARAMETER].string_value = record
    # what tritonclient.grpc's get_model_config answers: a response whose `config` is the model's ModelConfig
    answer = SimpleNamespace(config=config)
    return SimpleNamespace(model="news", client=SimpleNamespace(get_model_config=lambda model: answer))


def test_all_scores_warns_of_a_record_it_cannot_read(capsys):
    from ernie_deploy.evaluate.served import served_labels

    assert served_labels(_client(_record("news"))) == ["sports", "finance"]
    assert capsys.readouterr().err == ""
    assert served_labels(_client(_record("news", format=FORMAT - 1))) == []  # each probability under its label id
    err = capsys.readouterr().err
    assert err.startswith(f"warning: news's record is in record format {FORMAT - 1}")
    assert REBUILD in err and "under its label id" in err
