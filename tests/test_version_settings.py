"""A version is its record: its serving settings live in `<model>/<V>/model.json` alone, every config a move between
versions writes is what `build` renders from the record of the version it serves, a version may change only its own
settings (core.settings.VersionSettings), and what its record says is what its configs say."""

from __future__ import annotations

from dataclasses import fields

import pytest

from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.settings import ModelSettings, ServingSettings, TokenizerSettings, VersionSettings
from ernie_deploy.core.tasks import DEMO_MODELS, TOKEN_CLS
from ernie_deploy.operate.rollout import rollout
from ernie_deploy.repository.add_version import build_version
from ernie_deploy.repository.build import BuildOptions, build
from ernie_deploy.repository.configs import parse, render
from ernie_deploy.repository.versions import STALE_SETTINGS_FILE, VersionedModel
from tests.conftest import artifacts

NEWS = "news"
ENSEMBLE = BuildOptions(runtime="python", layout="ensemble")


def test_every_serving_setting_is_of_exactly_one_kind():
    kinds = [{f.name for f in fields(kind)} for kind in (VersionSettings, ModelSettings, TokenizerSettings)]
    assert sum(len(k) for k in kinds) == len(set().union(*kinds)), "a setting of two kinds"
    assert set().union(*kinds) == {f.name for f in fields(ServingSettings)}


def _unpinned(config):
    """A config as `build` writes it: loading every version, an ensemble's versioned steps unpinned."""
    copy = parse(render(config))
    copy.ClearField("version_policy")
    for step in copy.ensemble_scheduling.step:
        step.model_version = -1
    return render(copy)


LAYOUTS = {
    "ensemble": ("seq", BuildOptions(runtime="python", layout="ensemble", instances=2, ort_threads=1)),
    "ensemble-ort-windows": ("token", BuildOptions(runtime="onnxruntime", layout="ensemble", long_text="window")),
    "graph-postprocess": ("seq", BuildOptions(runtime="onnxruntime", layout="graph-postprocess", max_batch_size=8)),
    "tokenizer-in-model": ("token", BuildOptions(runtime="python", layout="tokenizer-in-model", long_text="window")),
    "fused": ("seq", BuildOptions(runtime="python", layout="fused", max_queue_delay_us=500)),
    "cached": ("seq", BuildOptions(runtime="python", layout="ensemble", response_cache=True)),
}


@pytest.mark.parametrize("case", LAYOUTS)
def test_a_version_rendered_from_its_record_is_what_build_wrote(case, tiny_pipeline, tiny_token_pipeline, tmp_path):
    """In every layout (a served model file that is not the converted one included: the postprocess appended, the
    windows wrapped for the ORT backend), the configs rendered from version 1's record are build's, byte for byte."""
    kind, options = LAYOUTS[case]
    pipeline, name = (tiny_pipeline, NEWS) if kind == "seq" else (tiny_token_pipeline, DEMO_MODELS[TOKEN_CLS.name])
    repo = tmp_path / "models"
    build(artifacts(pipeline, name), repo, options)
    model = VersionedModel.read(repo, name)
    assert _unpinned(model.pinned(1)) == _unpinned(model.entry)
    for step, config in model.steps.items():
        assert _unpinned(model.with_versions(step, [1], rendered_from=1)) == _unpinned(config), step


class _Admin:
    """The repository API a move calls, answered here: every model of `repo` is the server's, every load works."""

    url = "grpc://test"

    def __init__(self, repo):
        self.repo, self.loaded = repo, []

    def index(self):
        return [{"name": p.name} for p in self.repo.iterdir() if (p / "config.pbtxt").is_file()]

    def load(self, name):
        self.loaded.append(name)

    def unload(self, name):
        pass


def _files(repo) -> dict[str, bytes]:
    return {str(p.relative_to(repo)): p.read_bytes() for p in sorted(repo.rglob("config.pbtxt"))}


@pytest.mark.parametrize("layout", ["ensemble", "fused"])
def test_a_rollout_renders_the_versions_settings_from_its_record(layout, tiny_pipeline, tmp_path):
    """A version with other settings: no settings file anywhere, its record says them, a rollout writes the configs
    its record renders (the shared tokenizer keeps its own), and a rollback writes back what build wrote."""
    repo = tmp_path / "models"
    options = BuildOptions(runtime="python", layout=layout)
    build(artifacts(tiny_pipeline, NEWS), repo, options)
    faster = BuildOptions(runtime="python", layout=layout, instances=2, ort_threads=1, max_queue_delay_us=500)
    build_version(artifacts(tiny_pipeline, NEWS), repo, faster, version=2)
    assert not list(repo.rglob(STALE_SETTINGS_FILE))
    model = VersionedModel.read(repo, NEWS)
    record = model.record(2)
    assert (record.serving.instances, record.serving.ort_threads, record.serving.max_queue_delay_us) == (2, 1, 500)
    assert model.record(1).serving.instances == 1
    pinned_before = _files(repo)
    runner = model.layout.homes(record, "")["model"]

    rollout(repo, NEWS, 2, _Admin(repo), lambda canary, texts: None)
    after = VersionedModel.read(repo, NEWS)
    assert after.serving_version() == 2
    for name in {NEWS, *after.steps}:
        config = parse((repo / name / "config.pbtxt").read_text())
        if name != NEWS or layout == "fused":
            assert config.instance_group[0].count == 2, name
            assert config.dynamic_batching.max_queue_delay_microseconds == 500, name
    runs = parse((repo / runner / "config.pbtxt").read_text())
    assert runs.parameters["intra_op_threads"].string_value == "1"
    if layout == "ensemble":
        tokenizer = parse((repo / "ernie_tokenizer" / "config.pbtxt").read_text())
        assert tokenizer.instance_group[0].count == 1, "the shared tokenizer keeps its own settings"
    assert not (repo / f"{NEWS}_canary").exists()

    rollout(repo, NEWS, 1, _Admin(repo), lambda canary, texts: None)
    assert _files(repo) == pinned_before, "a rollback writes back the configs the serving version had"


def test_a_version_that_changes_a_model_or_tokenizer_setting_is_refused_by_name(tiny_pipeline, tmp_path):
    repo = tmp_path / "models"
    build(artifacts(tiny_pipeline, NEWS), repo, ENSEMBLE)
    entry = artifacts(tiny_pipeline, NEWS)
    with pytest.raises(ErnieDeployError, match=r"changes monitor True -> False: a setting every version of 'news'"):
        build_version(entry, repo, BuildOptions(runtime="python", layout="ensemble", monitor=False), version=2)
    with pytest.raises(ErnieDeployError, match="changes pad_to_multiple_of 1 -> 8: a setting the models that share"):
        build_version(entry, repo, BuildOptions(runtime="python", layout="ensemble", pad_to_multiple_of=8), version=2)
    with pytest.raises(ErnieDeployError, match="changes ragged True -> False") as refused:
        build_version(entry, repo, BuildOptions(runtime="python", layout="ensemble", ragged=False), version=2)
    assert "build the version with ragged True" in refused.value.fix
    assert VersionedModel.read(repo, NEWS).on_disk() == [1] and not (repo / NEWS / "2").exists()


def test_the_record_says_the_batch_size_the_entry_takes(tiny_pipeline, tmp_path):
    """The entry of a model that shares its tokenizer step takes no larger batches than that step: the version's
    record says the capped size, and every config rendered from it (the gateway splits requests by it too)."""
    from ernie_deploy.gateway.models import ServedModel

    repo = tmp_path / "models"
    build(artifacts(tiny_pipeline, NEWS), repo, BuildOptions(runtime="python", layout="ensemble", max_batch_size=8))
    larger = BuildOptions(runtime="python", layout="ensemble", max_batch_size=64, instances=2)
    build_version(artifacts(tiny_pipeline, NEWS), repo, larger, version=2)
    smaller = BuildOptions(runtime="python", layout="ensemble", max_batch_size=4)
    build_version(artifacts(tiny_pipeline, NEWS), repo, smaller, version=3)
    model = VersionedModel.read(repo, NEWS)
    assert model.record(2).serving.max_batch_size == 8 and model.record(2).serving.instances == 2
    assert model.record(3).serving.max_batch_size == 4
    for version, size in ((2, 8), (3, 4)):
        assert model.pinned(version).max_batch_size == size
        assert {model.with_versions(s, [version], rendered_from=version).max_batch_size for s in model.steps} == {size}
        assert ServedModel(model.record(version)).max_batch_size == size
    assert parse((repo / "ernie_tokenizer" / "config.pbtxt").read_text()).max_batch_size == 8


def test_a_leftover_settings_file_is_refused_by_name_with_the_rebuild(tiny_pipeline, tmp_path):
    from ernie_deploy.repository.check import check_repository

    repo = tmp_path / "models"
    build(artifacts(tiny_pipeline, NEWS), repo, BuildOptions(runtime="python", layout="fused"))
    (repo / NEWS / "1" / STALE_SETTINGS_FILE).write_text("instance_group { count: 2 }", encoding="utf-8")
    with pytest.raises(ErnieDeployError, match="news/1/settings.pbtxt") as refused:
        VersionedModel.read(repo, NEWS)
    assert "ernie-deploy build --model news" in refused.value.fix
    (problem,) = check_repository(repo)
    assert "settings.pbtxt" in problem.message and "ernie-deploy build --model news" in problem.fix
