"""Named models: any number per repository, of either task; adding or replacing one leaves the others as they were."""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.spec import REBUILD, ModelSpec
from ernie_deploy.core.tasks import DEMO_MODELS, SEQ_CLS, TASK_PARAMETER, TOKEN_CLS, TOKENIZER_STEP, check_model_name
from ernie_deploy.repository.build import BuildOptions, ModelArtifacts, build
from ernie_deploy.repository.configs import parse
from ernie_deploy.repository.served import served_models

from .conftest import artifacts

PYTHON = BuildOptions(runtime="python", layout="ensemble")


def _entry(pipeline, name: str | None, vocab_file: Path | None = None) -> ModelArtifacts:
    entry = artifacts(pipeline, name)
    return replace(entry, vocab_file=vocab_file) if vocab_file else entry


def _files(repository: Path, models: set[str]) -> dict[str, str]:
    """sha256 of every file of `models`, by path."""
    return {
        str(path.relative_to(repository)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(repository.rglob("*"))
        if path.is_file() and path.relative_to(repository).parts[0] in models
    }


def _models(repository: Path) -> set[str]:
    return {path.name for path in repository.iterdir()}


@pytest.mark.parametrize("name", ["1news", "news/cls", "", "a" * 65, "新闻", "news classifier"])
def test_unusable_model_names_are_refused_with_the_rule(name):
    with pytest.raises(ErnieDeployError, match="a letter first"):
        check_model_name(name)
    with pytest.raises(ErnieDeployError, match="a letter first"):
        replace(ModelSpec.new(SEQ_CLS), name=name)


def test_a_named_model_keeps_its_task_and_takes_the_name():
    news = ModelSpec.new(SEQ_CLS, "news")
    assert (news.task, news.kind, news.name) == ("seq_cls", "sequence", "news")
    assert (news.model_step, news.postprocess_step, news.artifact_name) == ("news_model", "news_postprocess", "news")
    demo = ModelSpec.new(SEQ_CLS, None)
    assert demo == ModelSpec.new(SEQ_CLS) and demo.artifact_name == "seq_cls"


def test_models_are_added_one_at_a_time_and_the_others_stay_byte_for_byte(tiny_pipeline, tiny_token_pipeline, tmp_path):
    repo = tmp_path / "models"
    build(_entry(tiny_pipeline, "news"), repo, PYTHON)
    news_files = _files(repo, _models(repo))
    build(_entry(tiny_token_pipeline, "people"), repo, PYTHON)
    build(_entry(tiny_pipeline, "sentiment"), repo, PYTHON)
    news_models = {"news", "news_model", "news_postprocess", TOKENIZER_STEP}
    assert {path.split("/")[0] for path in news_files} == news_models
    assert _files(repo, news_models) == news_files
    # One vocabulary, one max_seq_len, one set of options: one tokenizer for all three.
    assert _models(repo) == {
        TOKENIZER_STEP,
        *(f"{n}{s}" for n in ("news", "people", "sentiment") for s in ("", "_model", "_postprocess")),
    }
    assert {name: (model.name, model.task_spec) for name, model in served_models(repo).items()} == {
        "news": ("news", SEQ_CLS),
        "people": ("people", TOKEN_CLS),
        "sentiment": ("sentiment", SEQ_CLS),
    }
    ensemble = parse((repo / "people" / "config.pbtxt").read_text())
    assert ensemble.parameters[TASK_PARAMETER].string_value == "token_cls"
    assert ensemble.ensemble_scheduling.step[0].model_name == TOKENIZER_STEP


def test_replacing_a_model_removes_what_it_no_longer_uses(tiny_pipeline, tmp_path):
    repo = tmp_path / "models"
    build([_entry(tiny_pipeline, "news"), _entry(tiny_pipeline, "sentiment")], repo, PYTHON)
    sentiment = _files(repo, {"sentiment", "sentiment_model", "sentiment_postprocess", TOKENIZER_STEP})
    build(_entry(tiny_pipeline, "news"), repo, BuildOptions(runtime="python", layout="fused"))
    assert not (repo / "news_model").exists() and not (repo / "news_postprocess").exists()
    assert (repo / "news" / "1" / "model.onnx").exists()
    assert _files(repo, {"sentiment", "sentiment_model", "sentiment_postprocess", TOKENIZER_STEP}) == sentiment
    # The last model using the tokenizer moves to another vocabulary: it gets its own, the old one goes.
    other_vocab = tmp_path / "vocab.txt"
    other_vocab.write_text(tiny_pipeline.static.vocab_file.read_text() + "新词\n", encoding="utf-8")
    build(_entry(tiny_pipeline, "sentiment", other_vocab), repo, PYTHON)
    step = parse((repo / "sentiment" / "config.pbtxt").read_text()).ensemble_scheduling.step[0].model_name
    assert step == TOKENIZER_STEP, "a free familiar name is taken again"
    assert "新词" in (repo / step / "1" / "tokenizer.json").read_text(encoding="utf-8")
    assert not list(repo.parent.glob("*.staging*")), "staging folders left behind"


def test_a_tokenizer_in_use_is_never_rewritten_for_a_new_vocabulary(tiny_pipeline, tmp_path):
    repo = tmp_path / "models"
    build(_entry(tiny_pipeline, "news"), repo, PYTHON)
    before = _files(repo, {TOKENIZER_STEP})
    other_vocab = tmp_path / "vocab.txt"
    other_vocab.write_text(tiny_pipeline.static.vocab_file.read_text() + "新词\n", encoding="utf-8")
    build(_entry(tiny_pipeline, "sentiment", other_vocab), repo, PYTHON)
    assert _files(repo, {TOKENIZER_STEP}) == before
    step = parse((repo / "sentiment" / "config.pbtxt").read_text()).ensemble_scheduling.step[0].model_name
    assert step.startswith(f"{TOKENIZER_STEP}_") and (repo / step / "1" / "tokenizer.json").exists()


def test_a_name_that_would_overwrite_another_models_step_is_refused(tiny_pipeline, tmp_path):
    repo = tmp_path / "models"
    build(_entry(tiny_pipeline, "news_model"), repo, PYTHON)
    before = _files(repo, _models(repo))
    with pytest.raises(ErnieDeployError, match="would overwrite news_model") as err:
        build(_entry(tiny_pipeline, "news"), repo, PYTHON)
    assert "another --model" in str(err.value)
    assert _files(repo, _models(repo)) == before


def test_a_model_listed_twice_is_refused(tiny_pipeline, tmp_path):
    with pytest.raises(ErnieDeployError, match="news is listed twice"):
        build([_entry(tiny_pipeline, "news"), _entry(tiny_pipeline, "news")], tmp_path / "models", PYTHON)


def test_a_repository_built_before_models_were_named_is_named_by_check_with_the_rebuild_command(
    tiny_pipeline, tmp_path
):
    from ernie_deploy.repository.check import check_repository

    repo = tmp_path / "models"
    build(_entry(tiny_pipeline, None), repo, PYTHON)
    name = DEMO_MODELS[SEQ_CLS.name]
    config = repo / name / "config.pbtxt"
    config.write_text(
        "\n".join(line for line in config.read_text().splitlines() if TASK_PARAMETER not in line), encoding="utf-8"
    )
    # Not read as the demo model of its folder's name: `check` names it and the command that rebuilds it.
    problems = check_repository(repo)
    assert [(p.model, p.message) for p in problems] == [
        (name, "an ensemble that names no task: built by an older ernie-deploy")
    ]
    assert problems[0].fix == REBUILD and served_models(repo) == {}


def _artifacts_for(pipeline, root: Path, name: str) -> None:
    shutil.copytree(pipeline.static.root, root / "static" / name)
    (root / "onnx" / name).mkdir(parents=True)
    shutil.copy(pipeline.onnx, root / "onnx" / name / "model.onnx")


def test_build_command_takes_models_by_name(tiny_pipeline, tiny_token_pipeline, tmp_path, monkeypatch, capsys):
    from ernie_deploy.cli import main

    artifacts = tmp_path / "artifacts"
    _artifacts_for(tiny_pipeline, artifacts, "news")
    _artifacts_for(tiny_token_pipeline, artifacts, "people")
    monkeypatch.setenv("ERNIE_DEPLOY_ARTIFACTS", str(artifacts))
    repo = tmp_path / "models"
    assert main(["build", "--model", "news", "--model", "people", "-r", str(repo), "--runtime", "python"]) == 0
    assert set(served_models(repo)) == {"news", "people"}
    assert main(["build", "--model", "missing", "--repository", str(repo)]) != 0
    err = capsys.readouterr().err
    assert "no exported model named 'missing'" in err and "ernie-deploy export --model missing" in err
    assert main(["build", "--model", "people", "--task", "seq_cls", "--repository", str(repo)]) != 0
    assert "exported for task token_cls, not seq_cls" in capsys.readouterr().err


@pytest.mark.integration
def test_named_models_are_served_side_by_side_and_clients_pick_them(
    tiny_pipeline, tiny_token_pipeline, tmp_path, capsys
):
    from ernie_deploy.client.grpc_client import Client, decode_outputs
    from ernie_deploy.evaluate.offline import onnx_predictions
    from ernie_deploy.evaluate.served import main as client_main
    from ernie_deploy.server.process import TritonServer
    from ernie_deploy.serving.entity_scores import same_entities

    repo = tmp_path / "models"
    build([_entry(tiny_pipeline, "news"), _entry(tiny_pipeline, "sentiment")], repo, PYTHON)
    build(_entry(tiny_token_pipeline, "people"), repo, PYTHON)
    texts = ["国足公布世预赛名单", "股市大涨 abc 123", "张三在北京大学读书"]
    # Keyed as `ernie-deploy serve` runs it: the clients must not need the restricted model-config API.
    key = "named-models-test-key-0123"
    with TritonServer(
        repo, http_port=0, grpc_port=0, metrics_port=0, log_file=tmp_path / "server.log", admin_key=key
    ) as server:
        for name, pipeline in (("news", tiny_pipeline), ("sentiment", tiny_pipeline), ("people", tiny_token_pipeline)):
            task = pipeline.task
            with Client(task, server.grpc_url, model=name) as client:
                client.check_ready()
                served = decode_outputs(task, client.infer(texts))
            expected = onnx_predictions(pipeline.static.spec, pipeline.onnx, pipeline.static.vocab_file, texts)
            assert same_entities(served, expected), name  # labels and spans equal, entities' scores within 1e-5
        # The seq_cls client pointed at a token_cls model says so, instead of misreading its answers.
        assert client_main(SEQ_CLS, ["--grpc-url", server.grpc_url, "--model", "people", "--text", "张三"]) == 2
        assert "this client reads seq_cls answers" in capsys.readouterr().err
        assert client_main(SEQ_CLS, ["--grpc-url", server.grpc_url, "--model", "news", "--text", "股市大涨"]) == 0
    assert np.all([name in served_models(repo) for name in ("news", "sentiment", "people")])
