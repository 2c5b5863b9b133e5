"""scripts/quickstart.sh with an argument leaves the checkout as it was: its repository goes to artifacts/models/
(ignored by git) and the committed demo repository models/ is not touched."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ernie_deploy.server.preflight import free_ports
from tests.conftest import checkout_copy

pytestmark = pytest.mark.integration


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink() and ".venv" not in p.parts
    }


def test_a_quickstart_with_arguments_writes_only_under_artifacts(tmp_path):
    checkout = checkout_copy(tmp_path / "checkout", committed_models=True)
    before = _files(checkout)
    http, grpc, metrics = free_ports(3)
    env = dict(os.environ, HTTP_PORT=str(http), GRPC_PORT=str(grpc), METRICS_PORT=str(metrics))
    # The demo models with a convert option: before, this rebuilt the committed models/ (any option may change what
    # its configs record: another checkpoint, a training budget, INT8).
    result = subprocess.run(
        ["bash", "scripts/quickstart.sh", "--runtime", "python"],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert "seq_cls   accuracy" in result.stdout and "token_cls f1" in result.stdout  # it ran to the end
    assert "bash scripts/serve.sh artifacts/models" in result.stdout  # and says where its repository is
    after = _files(checkout)
    changed = sorted(name for name in before if after.get(name) != before[name])
    added = sorted(name for name in after if name not in before and not name.startswith("artifacts/"))
    assert (changed, added) == ([], []), "the quickstart wrote outside artifacts/"
    assert (checkout / "artifacts" / "models" / "ernie_seqcls" / "config.pbtxt").is_file()


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
