"""Every version of a served model carries its own record (`<model>/<version>/model.json`), and the tools that read a
served model's record (check, stats, the gateway) read the record of the version that serves: a rollout and a
rollback switch what they show."""

from __future__ import annotations

import json
import re
import urllib.request
from dataclasses import replace

import pytest

from ernie_deploy.core.spec import FORMAT, SPEC_FILE, ModelSpec
from ernie_deploy.core.tasks import MULTI_LABEL
from ernie_deploy.repository.add_version import build_version
from ernie_deploy.repository.build import BuildOptions, build
from ernie_deploy.repository.versions import VersionedModel
from tests.conftest import artifacts

NAME = "topics"


def _versions(pipeline):
    """Two versions of one multi-label model: the same weights, other thresholds."""
    labels = pipeline.static.spec.labels
    return [
        artifacts(pipeline, NAME, task=MULTI_LABEL.name, thresholds=dict.fromkeys(labels, threshold))
        for threshold in (0.5, 0.25)
    ]


def _built(pipeline, repo):
    one, two = _versions(pipeline)
    build(one, repo, BuildOptions(runtime="python"))
    build_version(two, repo, BuildOptions(runtime="python", layout="fused", instances=2), version=2)
    return one, two


def test_each_version_folder_holds_its_own_record(tiny_pipeline, tmp_path):
    repo = tmp_path / "models"
    _built(tiny_pipeline, repo)
    records = {v: ModelSpec.read(repo / NAME / str(v)) for v in (1, 2)}
    assert json.loads((repo / NAME / "2" / SPEC_FILE).read_text())["format"] == FORMAT
    assert [(r.version, r.serving.instances, set(r.thresholds.values())) for r in records.values()] == [
        (1, 1, {0.5}),
        (2, 2, {0.25}),
    ]
    # Only what the version changed differs between the two records.
    differ = {k for k, v in records[1].to_dict().items() if records[2].to_dict()[k] != v}
    assert differ <= {"version", "serving", "thresholds", "reference"}
    # The entry carries the serving version's record until a rollout moves it.
    model = VersionedModel.read(repo, NAME)
    assert model.serving_version() == 1
    assert ModelSpec.from_json(model.entry.parameters["model_spec"].string_value) == records[1]
    pinned = model.pinned(2)
    assert ModelSpec.from_json(pinned.parameters["model_spec"].string_value) == records[2]


def test_check_refuses_an_entry_whose_record_is_not_its_serving_versions(tiny_pipeline, tmp_path):
    from ernie_deploy.repository.check import check_repository

    repo = tmp_path / "models"
    _built(tiny_pipeline, repo)
    assert check_repository(repo) == []
    record = ModelSpec.read(repo / NAME / "1")
    replace(record, max_text_chars=record.max_text_chars - 1).write(repo / NAME / "1")
    (problem,) = check_repository(repo)
    assert "not that of version 1" in problem.message and "rollout --model topics --to 1" in problem.fix


@pytest.mark.integration
def test_rollout_and_rollback_switch_what_check_stats_and_the_gateway_show(tiny_pipeline, tmp_path, capsys):
    from ernie_deploy.cli import main
    from ernie_deploy.gateway.process import GatewayProcess
    from ernie_deploy.server.process import TritonServer

    repo = tmp_path / "models"
    _built(tiny_pipeline, repo)
    served_line = re.compile(rf"^{NAME}: serving version (\d+): (.*)$", re.M)

    def facts(line) -> tuple[int, int]:
        """The version and the instances a `check` or `stats` line shows (instances: shown where not 1)."""
        instances = re.search(r"instances (\d+)", line[2])
        return int(line[1]), int(instances[1]) if instances else 1

    with TritonServer(repo, http_port=0, grpc_port=0, metrics_port=0, log_file=tmp_path / "server.log") as server:
        with GatewayProcess(repo, server.grpc_url).start(timeout=60) as gateway:

            def shown() -> dict:
                capsys.readouterr()
                assert main(["check", "--repository", str(repo)]) == 0
                out = capsys.readouterr().out
                check = served_line.search(out)
                assert check, out
                assert main(["stats", "--http-url", server.http_url, "--repository", str(repo)]) == 0
                stats = served_line.search(capsys.readouterr().out)
                with urllib.request.urlopen(f"{gateway.url}/info", timeout=10) as response:
                    (info,) = [m for m in json.load(response)["models"] if m["name"] == NAME]
                return {
                    "check": facts(check),
                    "stats": facts(stats),
                    "gateway": (info["serving"]["instances"], set(info["thresholds"].values())),
                }

            assert shown() == {"check": (1, 1), "stats": (1, 1), "gateway": (1, {0.5})}
            argv = ["--model", NAME, "--repository", str(repo), "--grpc-url", server.grpc_url]
            assert main(["rollout", "--to", "2", *argv]) == 0
            assert shown() == {"check": (2, 2), "stats": (2, 2), "gateway": (2, {0.25})}
            assert main(["rollback", *argv]) == 0
            assert shown() == {"check": (1, 1), "stats": (1, 1), "gateway": (1, {0.5})}
