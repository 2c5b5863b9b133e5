"""`ernie-deploy tune`: the search, its budget and objective, the winner written as a version that carries its own
serving settings in its record, and that version rolled out and back on a real server."""

from __future__ import annotations

import json

import pytest

from ernie_deploy.bench.config import BenchConfig
from ernie_deploy.bench.tune import (
    DIMENSIONS,
    Objective,
    Trial,
    TuneResult,
    gain,
    render,
    search_space,
    tune,
    write_winner,
)
from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.tasks import DEMO_MODELS, SEQ_CLS, TOKEN_CLS
from ernie_deploy.evaluate.inputs import ModelInputs
from ernie_deploy.repository.build import BuildOptions, build
from ernie_deploy.repository.configs import parse
from ernie_deploy.repository.versions import STALE_SETTINGS_FILE, VersionedModel
from tests.conftest import NEWS_TEXTS, artifacts, named_artifacts

NEWS = "news"
FUSED = BuildOptions(runtime="python", layout="fused")


def _inputs(pipeline, name=NEWS) -> ModelInputs:
    return ModelInputs(artifacts(pipeline, name).model, pipeline.onnx, pipeline.static, list(NEWS_TEXTS))


def _speed(table: dict):
    """A stand-in for the server's speed in the search tests: texts/s by (layout, instances), p99 by instances."""

    def measure(inputs, options, config, concurrency, workdir):
        throughput = table.get((options.layout, options.instances), 100.0)
        return Trial({}, throughput, 5.0, 10.0 * options.instances, 0, "test", seconds=1.0)

    return measure


def test_search_space_keeps_what_fits_the_model_and_starts_from_its_own_values(tiny_pipeline, tiny_token_pipeline):
    base = BuildOptions(runtime="python", layout="fused", instances=2)
    space = search_space(_inputs(tiny_pipeline), base)
    assert list(space) == list(DIMENSIONS)
    assert space["instances"][0] == 2 and space["layout"][0] == "fused"
    assert "graph-postprocess" in space["layout"]
    token = search_space(_inputs(tiny_token_pipeline, DEMO_MODELS[TOKEN_CLS.name]), base)
    assert "graph-postprocess" not in token["layout"], "a token model has no postprocess graph"
    with pytest.raises(ErnieDeployError, match="unknown tuning dimension speed"):
        search_space(_inputs(tiny_pipeline), base, ["speed"])


def test_coordinate_descent_keeps_the_best_of_each_dimension(tiny_pipeline, tmp_path):
    speed = _speed({("fused", 1): 100, ("ensemble", 1): 150, ("ensemble", 2): 220, ("fused", 2): 500})
    result = tune(
        _inputs(tiny_pipeline), BenchConfig(), Objective(), FUSED, tmp_path,
        dimensions=["layout", "instances"], measure=speed, progress=False,
    )  # fmt: skip
    # the layout first (ensemble wins at 1 instance), then the instances with it: fused x 2 is never visited
    assert result.best == {"layout": "ensemble", "instances": 2}
    assert [t.options for t in result.trials][:2] == [
        {"layout": "fused", "instances": 1},
        {"layout": "ensemble", "instances": 1},
    ]
    assert {"layout": "fused", "instances": 2} not in [t.options for t in result.trials]
    assert "**best**" in render(result, Objective())


def test_a_p99_budget_and_the_latency_objective_change_the_winner(tiny_pipeline, tmp_path):
    speed = _speed({("fused", 1): 100, ("fused", 2): 300})
    inputs, dims = _inputs(tiny_pipeline), ["instances"]
    fast = tune(inputs, BenchConfig(), Objective(), FUSED, tmp_path, dimensions=dims, measure=speed, progress=False)
    assert fast.best == {"instances": 2}
    tight = Objective("throughput", p99_budget_ms=15.0)  # 2 instances' p99 is 20 ms in the stand-in
    bounded = tune(inputs, BenchConfig(), tight, FUSED, tmp_path, dimensions=dims, measure=speed, progress=False)
    assert bounded.best == {"instances": 1}
    assert Objective("latency").key(Trial({}, 1.0, 2.0)) > Objective("latency").key(Trial({}, 9.0, 3.0))
    assert Objective().key(Trial({}, 900.0, 1.0, errors=1)) < Objective().key(Trial({}, 1.0, 1.0))
    with pytest.raises(ErnieDeployError, match="--p99-ms bounds the throughput"):
        Objective("latency", 10.0)


def test_the_budget_stops_the_search_before_a_trial_that_would_not_fit(tiny_pipeline, tmp_path):
    result = tune(
        _inputs(tiny_pipeline), BenchConfig(), Objective(), FUSED, tmp_path,
        dimensions=["layout", "instances", "ort_threads"], measure=_speed({}), budget_s=2.5, progress=False,
    )  # fmt: skip
    assert len(result.trials) == 2 and result.untried > 0
    assert "left out by the budget" in render(result, Objective())


def _repo_with_news(pipeline, tmp_path, options=FUSED):
    repo = tmp_path / "models"
    build(artifacts(pipeline, NEWS), repo, options)
    return repo


def test_the_winner_is_a_version_that_carries_its_settings(tiny_pipeline, tmp_path):
    repo = _repo_with_news(tiny_pipeline, tmp_path)
    before = parse((repo / "news" / "config.pbtxt").read_text())
    result = TuneResult("news", "highest throughput", 8, best={"layout": "fused", "instances": 2, "ort_threads": 1})
    written = write_winner(result, _inputs(tiny_pipeline), repo, FUSED)
    assert written.version == 2 and "rollout --model news --to 2" in written.advice
    model = VersionedModel.read(repo, "news")
    assert model.on_disk() == [1, 2] and model.serving_version() == 1
    assert model.entry.instance_group == before.instance_group and model.entry.instance_group[0].count == 1
    # The version's settings are its record's, and nowhere else.
    assert (model.record(2).serving.instances, model.record(2).serving.ort_threads) == (2, 1)
    assert model.record(1).serving.instances == 1, "the serving version keeps its own settings"
    assert not list(repo.rglob(STALE_SETTINGS_FILE))
    two = model.pinned(2)
    assert two.instance_group[0].count == 2 and two.parameters["intra_op_threads"].string_value == "1"
    assert model.pinned(1).instance_group[0].count == 1
    # what is already served is not written again; another layout and a shared tokenizer are rebuilds
    same = TuneResult("news", "", 8, best={"layout": "fused", "instances": 1})
    assert write_winner(same, _inputs(tiny_pipeline), repo, FUSED).version is None
    other = TuneResult("news", "", 8, best={"layout": "ensemble", "instances": 1})
    advice = write_winner(other, _inputs(tiny_pipeline), repo, FUSED)
    assert advice.version is None and "--layout ensemble" in advice.advice
    assert VersionedModel.read(repo, "news").on_disk() == [1, 2]


def test_a_winner_within_the_noise_is_not_written(tiny_pipeline, tmp_path):
    repo = _repo_with_news(tiny_pipeline, tmp_path)
    served = Trial({"instances": 1}, 100.0, 5.0, 9.0)
    result = TuneResult("news", "", 8, trials=[served, Trial({"instances": 2}, 103.0, 5.0, 9.0)], best={"instances": 2})
    kept = write_winner(result, _inputs(tiny_pipeline), repo, FUSED)
    assert kept.version is None and "+3.0%" in kept.advice and "--min-gain" in kept.advice
    assert VersionedModel.read(repo, "news").on_disk() == [1]
    assert write_winner(result, _inputs(tiny_pipeline), repo, FUSED, min_gain=0.02).version == 2
    faster = TuneResult("news", "", 1, trials=[served, Trial({"instances": 2}, 90.0, 4.0, 9.0)], best={"instances": 2})
    assert gain(faster, Objective("latency")) == pytest.approx(0.25) and gain(faster, Objective()) < 0


def test_a_version_that_changes_more_than_settings_is_still_refused(tiny_pipeline, tmp_path):
    from ernie_deploy.repository.add_version import build_version

    repo = _repo_with_news(tiny_pipeline, tmp_path)
    entry = artifacts(tiny_pipeline, NEWS)
    with pytest.raises(ErnieDeployError, match="does not fit"):
        build_version(entry, repo, BuildOptions(runtime="python", layout="fused", long_text="head_tail"), version=2)
    assert not (repo / "news" / "2").exists()


@pytest.mark.integration
def test_tune_command_measures_writes_a_version_and_rollout_applies_its_settings(
    tiny_pipeline, tmp_path, monkeypatch, capsys
):
    from ernie_deploy.cli import main
    from ernie_deploy.client.admin import RepositoryAdmin
    from ernie_deploy.client.grpc_client import Client, decode_outputs
    from ernie_deploy.server.process import TritonServer

    artifacts = named_artifacts(tiny_pipeline, "news", tmp_path / "artifacts")
    monkeypatch.setenv("ERNIE_DEPLOY_ARTIFACTS", str(artifacts))
    repo = str(tmp_path / "models")
    assert main(["build", "--model", "news", "--repository", repo, "--runtime", "python"]) == 0
    assert VersionedModel.read(repo, "news").layout.name == "fused", "the default layout on the python step"
    data = tmp_path / "texts.tsv"
    data.write_text("label\ttext\n" + "".join(f"x\t{t}\n" for t in NEWS_TEXTS), encoding="utf-8")
    out = tmp_path / "tune.json"
    argv = ["tune", "--model", "news", "-r", repo, "--dimensions", "instances", "--duration", "0.5", "--warmup", "0.1"]
    argv += ["--data", str(data), "--out", str(out), "--load-generator", "python", "--budget", "5"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    saved = json.loads(out.read_text())
    assert [t["options"]["instances"] for t in saved["trials"]] == [1, 2]
    assert all(t["throughput"] > 0 and t["errors"] == 0 for t in saved["trials"])
    assert "| instances | texts/s |" in printed and "**best**" in printed
    # Whichever won on this machine, a version with 2 instances rolls out and back with its settings.
    model = VersionedModel.read(repo, "news")
    version = max(model.on_disk()) + 1
    write_winner(TuneResult("news", "", 8, best={"instances": 2}), _inputs(tiny_pipeline), repo, FUSED, version)
    with TritonServer(repo, http_port=0, grpc_port=0, metrics_port=0, log_file=tmp_path / "server.log") as server:
        with Client(SEQ_CLS, server.grpc_url, model=NEWS) as client:
            before = decode_outputs(SEQ_CLS, client.infer(NEWS_TEXTS))
        rollout_argv = ["--repository", repo, "--grpc-url", server.grpc_url]
        assert main(["rollout", "--model", "news", "--to", str(version), *rollout_argv]) == 0
        served = parse((tmp_path / "models" / "news" / "config.pbtxt").read_text())
        assert served.instance_group[0].count == 2
        with RepositoryAdmin(server.grpc_url) as admin:
            loaded = admin.config("news")
            assert int(loaded["instance_group"][0]["count"]) == 2, "the server runs the version's settings"
        with Client(SEQ_CLS, server.grpc_url, model=NEWS) as client:
            assert decode_outputs(SEQ_CLS, client.infer(NEWS_TEXTS)) == before, "settings never change answers"
        assert main(["rollback", "--model", "news", "--to", "1", *rollout_argv]) == 0
        assert parse((tmp_path / "models" / "news" / "config.pbtxt").read_text()).instance_group[0].count == 1
    assert not list((tmp_path / "models").rglob(STALE_SETTINGS_FILE)), "a version's settings are its record's alone"
