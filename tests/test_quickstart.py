"""scripts/quickstart.sh leaves the checkout as it was: the demo run rebuilds the committed models/ byte for byte from
the shipped models, and a run with an argument builds its repository in artifacts/models/ (ignored by git)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from ernie_deploy.fetch.shipped import manifest
from ernie_deploy.server.preflight import free_ports
from tests.conftest import ROOT, checkout_copy

pytestmark = pytest.mark.integration


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink() and ".venv" not in p.parts
    }


def test_the_demo_quickstart_serves_the_shipped_scores_and_leaves_the_checkout_as_it_was(tmp_path):
    """The plain quickstart trains nothing, prints the scores the shipped models' manifests record (the figures the
    docs give), and rebuilds the committed models/ byte for byte: the checkout is as it was."""
    checkout = checkout_copy(tmp_path / "checkout", committed_models=True)
    before = _files(checkout)
    http, grpc, metrics = free_ports(3)
    env = dict(os.environ, HTTP_PORT=str(http), GRPC_PORT=str(grpc), METRICS_PORT=str(metrics))
    env["ERNIE_DEPLOY_CACHE"] = str(tmp_path / "cache")  # nothing cached: what is not shipped would train
    result = subprocess.run(
        ["bash", "scripts/quickstart.sh"], cwd=checkout, env=env, capture_output=True, text=True, timeout=3600
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    report = json.loads((checkout / "artifacts" / "reports" / "quickstart.json").read_text())
    assert report["training_s"] == {"seq_cls": 0, "token_cls": 0}
    assert not (tmp_path / "cache" / "bootstrap").exists() or not any((tmp_path / "cache" / "bootstrap").iterdir())
    for task, scores in report["scores"].items():
        shipped_test = manifest(task)["scores"]["test"]
        assert scores["paddle"] == scores["onnx"] == scores["served"] == shipped_test, (task, scores, shipped_test)
    after = _files(checkout)
    changed = sorted(name for name in before if after.get(name) != before[name])
    added = _not_ignored(name for name in after if name not in before)
    assert (changed, added) == ([], []), "the quickstart changed the checkout: models/ is not what demo/ builds"


def _not_ignored(names) -> list[str]:
    """The paths `git status` would show as new: those this repository's .gitignore does not ignore (artifacts/, the
    weights build places in models/)."""
    names = sorted(names)
    ignored = subprocess.run(
        ["git", "check-ignore", "--no-index", "--stdin"],
        cwd=ROOT,
        input="\n".join(names),
        capture_output=True,
        text=True,
    ).stdout.split()
    return [name for name in names if name not in set(ignored)]


def test_the_quickstart_refuses_a_repository_of_its_own(tmp_path):
    checkout = checkout_copy(tmp_path / "checkout", committed_models=True)
    result = subprocess.run(
        ["bash", "scripts/quickstart.sh", "--repository", "elsewhere"],
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 2
    assert "--repository is not taken here" in result.stderr and "scripts/convert.sh --repository DIR" in result.stderr
    assert not (checkout / "elsewhere").exists()
