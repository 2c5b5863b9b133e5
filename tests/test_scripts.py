"""The scripts a user runs parse as bash, the ones that serve reach the command they promise (a parse-only path that
ended a script early would pass every argument test and serve nothing), and convert.sh hands a value to the command
that reads it."""

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


# -- scripts/convert.sh --max-seq-len: the value goes on to the command that reads it ---------------------------------


def _convert_parse_only(*args: str) -> subprocess.CompletedProcess:
    """`scripts/convert.sh ARGS` with ERNIE_DEPLOY_PARSE_ONLY=1: every value checked by the parser of the command it
    goes to (the same command lines a run runs), nothing run."""
    env = {**os.environ, "ERNIE_DEPLOY_PARSE_ONLY": "1"}
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "convert.sh"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_convert_sh_passes_max_seq_len_to_add_for_a_model_of_ones_own(tmp_path):
    own = ["--task", "seq_cls", "--model", "news", "--source", str(tmp_path)]
    assert _convert_parse_only(*own, "--max-seq-len", "256").returncode == 0
    # the value reaches `add`'s own parser, which refuses what is not a number
    refused = _convert_parse_only(*own, "--max-seq-len", "long")
    assert refused.returncode == 2
    assert "ernie-deploy add: error: argument --max-seq-len: invalid int value: 'long'" in refused.stderr


def test_convert_sh_passes_max_seq_len_to_export_for_the_demo_models():
    refused = _convert_parse_only("--task", "token_cls", "--max-seq-len", "long")
    assert refused.returncode == 2
    assert "ernie-deploy export: error: argument --max-seq-len: invalid int value: 'long'" in refused.stderr
    missing = _convert_parse_only("--max-seq-len")
    assert missing.returncode == 2 and "--max-seq-len needs a value" in missing.stderr


def test_convert_sh_help_names_max_seq_len_and_ends_whole():
    shown = subprocess.run(
        ["bash", "scripts/convert.sh", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert shown.returncode == 0 and "--max-seq-len" in shown.stdout
    assert "ERNIE_DEPLOY_PARSE_ONLY=1" in shown.stdout.splitlines()[-1]  # the comment's last line, whole
