"""scripts/quickstart.sh with an argument leaves the checkout as it was: its repository goes to artifacts/models/
(ignored by git) and the committed demo repository models/ is not touched."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ernie_deploy.server.preflight import free_ports

ROOT = Path(__file__).resolve().parents[1]
VENV = Path(sys.executable).parent.parent

pytestmark = pytest.mark.integration


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink() and ".venv" not in p.parts
    }


def _checkout_copy(dest: Path) -> Path:
    """The files a clone has that the quickstart reads or could write over, and this environment as its .venv."""
    dest.mkdir()
    for name in ("scripts", "clients"):
        shutil.copytree(ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    for committed in [*ROOT.glob("models/*/config.pbtxt"), *ROOT.glob("models/*/1/model.py")]:
        target = dest / committed.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(committed, target)
    shutil.copy2(ROOT / "setup.cfg", dest / "setup.cfg")  # its time too: _env.sh reinstalls when setup.cfg is newer
    (dest / ".venv").symlink_to(VENV)
    return dest


def test_a_quickstart_with_arguments_writes_only_under_artifacts(tmp_path):
    checkout = _checkout_copy(tmp_path / "checkout")
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
    checkout = _checkout_copy(tmp_path / "checkout")
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
