"""Versions of a named model and their rollout on a running server: nothing lost, every answer explained."""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.core.tasks import SEQ_CLS
from ernie_deploy.repository.add_version import build_version
from ernie_deploy.repository.build import BuildOptions, ModelArtifacts, build
from ernie_deploy.repository.configs import parse
from ernie_deploy.repository.versions import VersionedModel
from tests.conftest import NEWS_TEXTS, artifacts, named_artifacts

PYTHON = BuildOptions(runtime="python", layout="ensemble")
NEWS = ModelSpec.new(SEQ_CLS, "news")
TEXTS = NEWS_TEXTS


@pytest.fixture(scope="module")
def second_version(tiny_pipeline_v2):
    return tiny_pipeline_v2


def _entry(pipeline) -> ModelArtifacts:
    return artifacts(pipeline, NEWS.name)


def _digests(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*.onnx")}


def test_a_new_version_lands_beside_the_serving_one_and_serving_stays(tiny_pipeline, second_version, tmp_path):
    repo = tmp_path / "models"
    build(_entry(tiny_pipeline), repo, PYTHON)
    assert VersionedModel.read(repo, "news").serving_version() == 1
    build_version(_entry(second_version), repo, PYTHON, version=2)
    model = VersionedModel.read(repo, "news")
    assert model.on_disk() == [1, 2] and model.serving_version() == 1
    # A restarted server would serve 1 too: the ensemble pins it and the steps load only it.
    pins = {s.model_name: s.model_version for s in model.entry.ensemble_scheduling.step}
    assert pins == {"ernie_tokenizer": -1, "news_model": 1, "news_postprocess": 1}
    for step in model.steps.values():
        assert list(step.version_policy.specific.versions) == [1]
    assert (repo / "news_model" / "2" / "model.py").exists() and (
        repo / "news_postprocess" / "2" / "labels.json"
    ).exists()
    with pytest.raises(ErnieDeployError, match="version 1 of 'news' is serving"):
        build_version(_entry(second_version), repo, PYTHON, version=1)


def test_a_version_that_does_not_fit_the_model_is_refused(tiny_pipeline, tiny_token_pipeline, tmp_path):
    repo = tmp_path / "models"
    build(_entry(tiny_pipeline), repo, PYTHON)
    before = _digests(repo)
    with pytest.raises(ErnieDeployError, match="keeps its model's tokenizer"):
        build_version(
            _entry(tiny_pipeline),
            repo,
            BuildOptions(runtime="python", layout="ensemble", max_text_chars=1000),
            version=2,
        )
    other_vocab = tmp_path / "vocab.txt"
    other_vocab.write_text(tiny_pipeline.static.vocab_file.read_text() + "新词\n", encoding="utf-8")
    entry = replace(_entry(tiny_pipeline), vocab_file=other_vocab)
    with pytest.raises(ErnieDeployError, match="another --model"):
        build_version(entry, repo, PYTHON, version=2)
    fewer_labels = artifacts(tiny_pipeline, NEWS.name, labels=("a", "b"))
    build_version(fewer_labels, repo, PYTHON, version=3)  # labels are the version's own file
    with pytest.raises(ErnieDeployError, match="fused"):
        build_version(_entry(tiny_pipeline), repo, BuildOptions(runtime="python", layout="fused"), version=4)
    with pytest.raises(ErnieDeployError, match="no model 'other'"):
        build_version(
            replace(artifacts(tiny_pipeline, "other", labels=()), vocab_file=other_vocab), repo, PYTHON, version=2
        )
    assert {k: v for k, v in _digests(repo).items() if not k.startswith("news_model/3")} == before


def test_build_command_adds_a_version(tiny_pipeline, second_version, tmp_path, monkeypatch, capsys):
    import shutil

    from ernie_deploy.cli import main

    artifacts = named_artifacts(tiny_pipeline, "news", tmp_path / "artifacts")
    monkeypatch.setenv("ERNIE_DEPLOY_ARTIFACTS", str(artifacts))
    repo = str(tmp_path / "models")
    assert main(["build", "--model", "news", "--repository", repo, "--runtime", "python"]) == 0
    shutil.copy(second_version.onnx, artifacts / "onnx" / "news" / "model.onnx")
    assert main(["build", "--model", "news", "--version", "2", "--repository", repo, "--runtime", "python"]) == 0
    assert "ernie-deploy rollout --model news --to 2" in capsys.readouterr().out
    assert VersionedModel.read(repo, "news").on_disk() == [1, 2]
    assert main(["build", "--version", "3", "--repository", repo]) == 2
    assert "exactly one --model" in capsys.readouterr().err


@pytest.mark.integration
def test_traffic_through_a_rollout_and_a_rollback_loses_nothing(tiny_pipeline, second_version, tmp_path):
    from ernie_deploy.cli import main
    from ernie_deploy.client.admin import RepositoryAdmin
    from ernie_deploy.evaluate.offline import onnx_predictions
    from ernie_deploy.operate.rollout import canary_probe, rollout
    from ernie_deploy.reliability.rollout_soak import rollout_soak
    from ernie_deploy.server.process import TritonServer

    repo = tmp_path / "models"
    build(_entry(tiny_pipeline), repo, PYTHON)
    build_version(_entry(second_version), repo, PYTHON, version=2)
    references = {
        v: onnx_predictions(p.static.spec, p.onnx, p.static.vocab_file, TEXTS)
        for v, p in ((1, tiny_pipeline), (2, second_version))
    }
    assert references[1] != references[2], "the two versions must be told apart by their answers"
    with TritonServer(repo, http_port=0, grpc_port=0, metrics_port=0, log_file=tmp_path / "server.log") as server:
        with RepositoryAdmin(server.grpc_url) as admin:
            report = rollout_soak(
                server.grpc_url, repo, NEWS, (1, 2), references, TEXTS, admin=admin, concurrency=3, settle_s=1.5
            )
        assert report.clean, report.to_dict()
        assert report.requests > 50 and report.answered == report.requests and report.resent == 0
        assert report.by_version["1"] > 0 and report.by_version["2"] > 0
        assert VersionedModel.read(repo, "news").serving_version() == 1
        assert not (repo / "news_canary").exists()
        # The CLI: roll out again; a version that is not there is refused with the fix.
        argv = ["--repository", str(repo), "--grpc-url", server.grpc_url]
        assert main(["rollout", "--model", "news", "--to", "2", *argv]) == 0
        assert VersionedModel.read(repo, "news").serving_version() == 2
        assert main(["rollout", "--model", "news", "--to", "7", *argv]) == 2
        assert main(["rollback", "--model", "news", *argv]) == 0
        assert VersionedModel.read(repo, "news").serving_version() == 1
        assert main(["rollback", "--model", "news", *argv]) == 2  # nothing older than 1
        # Another folder with the model is not what the server runs: refused by name, nothing in it edited.
        other = tmp_path / "other"
        people = artifacts(tiny_pipeline, "people")
        build([_entry(tiny_pipeline), people], other, PYTHON)
        build_version(_entry(second_version), other, PYTHON, version=2)
        before = {f: f.read_bytes() for f in other.rglob("config.pbtxt")}
        with pytest.raises(ErnieDeployError, match=f"does not run {other}: its repository has no people"):
            with RepositoryAdmin(server.grpc_url) as admin:
                rollout(other, NEWS.name, 2, admin, canary_probe(server.grpc_url))
        assert main(["rollout", "--model", "news", "--to", "2", "-r", str(other), "--grpc-url", server.grpc_url]) == 2
        assert {f: f.read_bytes() for f in other.rglob("config.pbtxt")} == before
        # A copy (the same models in another folder) shows itself at the canary, and is put back as it was.
        copy = tmp_path / "copy"
        shutil.copytree(repo, copy)
        before = {f: f.read_bytes() for f in copy.rglob("config.pbtxt")}
        with pytest.raises(ErnieDeployError, match=f"does not see news_canary, just written to {copy}"):
            with RepositoryAdmin(server.grpc_url) as admin:
                rollout(copy, NEWS.name, 2, admin, canary_probe(server.grpc_url))
        assert {f: f.read_bytes() for f in copy.rglob("config.pbtxt")} == before and not (copy / "news_canary").exists()
        assert VersionedModel.read(repo, "news").serving_version() == 1
    steps = parse((repo / "news_model" / "config.pbtxt").read_text())
    assert list(steps.version_policy.specific.versions) == [1]


def test_check_finds_a_pin_the_steps_do_not_load(tiny_pipeline, second_version, tmp_path):
    from ernie_deploy.repository.check import check_repository

    repo = tmp_path / "models"
    build(_entry(tiny_pipeline), repo, PYTHON)
    build_version(_entry(second_version), repo, PYTHON, version=2)
    assert not check_repository(repo)
    model = VersionedModel.read(repo, "news")
    model.write(model.pinned(2))  # the ensemble moved, the steps still load only version 1
    model.write(model.with_versions("news_postprocess", [1, 3], rendered_from=1))
    problems = [str(p) for p in check_repository(repo)]
    assert any("news: step news_model is pinned to version 2" in p for p in problems), problems
    assert any("news_postprocess: version_policy loads versions [3], which have no folder" in p for p in problems)
