"""The scripts a user runs parse as bash, and the ones that serve reach the command they promise (a parse-only path
that ended a script early would pass every argument test and serve nothing)."""

from __future__ import annotations

import os
import subprocess

import pytest

from .conftest import ROOT, checkout_copy

SCRIPTS = sorted(p.name for p in (ROOT / "scripts").glob("*.sh"))


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_parses_as_bash(script):
    result = subprocess.run(["bash", "-n", str(ROOT / "scripts" / script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_serve_sh_reaches_the_server_command(tmp_path):
    checkout = checkout_copy(tmp_path / "checkout")
    env = {k: v for k, v in os.environ.items() if k != "ERNIE_DEPLOY_PARSE_ONLY"}
    result = subprocess.run(
        ["bash", "scripts/serve.sh", "no_such_repository"],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    # past its parse-only path and the environment, at the check before `ernie-deploy serve`
    assert result.returncode == 2, result.stdout + result.stderr
    assert "serve.sh: no models in no_such_repository/" in result.stderr
