"""The quickstart refuses, by name and before it installs anything, a Python outside setup.cfg's python_requires (the
one statement of the supported versions) and a disk without room for the install."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

from .conftest import ROOT


def _bare_checkout(dest: Path) -> Path:
    """A clone as it arrives: the scripts and setup.cfg, no .venv yet."""
    dest.mkdir()
    shutil.copytree(ROOT / "scripts", dest / "scripts")
    shutil.copy2(ROOT / "setup.cfg", dest / "setup.cfg")
    return dest


def _quickstart(checkout: Path, **env: str) -> subprocess.CompletedProcess:
    import os

    return subprocess.run(
        ["bash", "scripts/quickstart.sh"],
        cwd=checkout,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_python_requires_is_the_range_the_readme_states():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    assert config["options"]["python_requires"] == ">=3.11,<3.14"
    assert "Python 3.11 to 3.13" in (ROOT / "README.md").read_text(encoding="utf-8")
    assert (3, 11) <= sys.version_info[:2] < (3, 14), "the tests run on a supported Python"


def test_an_unsupported_python_is_refused_before_anything_is_installed(tmp_path):
    checkout = _bare_checkout(tmp_path / "checkout")
    fake = tmp_path / "python3.10"
    fake.write_text("#!/bin/sh\necho 3.10\n")  # what `python -c 'print(version)'` of a Python 3.10 prints
    fake.chmod(0o755)
    result = _quickstart(checkout, PYTHON=str(fake))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "is Python 3.10; ernie-deploy needs Python >=3.11,<3.14" in result.stderr
    assert "PYTHON=/path/to/python3.11" in result.stderr
    assert not (checkout / ".venv").exists()


def test_too_little_free_disk_is_refused_before_anything_is_installed(tmp_path):
    checkout = _bare_checkout(tmp_path / "checkout")
    result = _quickstart(checkout, ERNIE_DEPLOY_MIN_FREE_GB="1000000")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "installing needs about 1000000 GB" in result.stderr and "MB free on the disk of" in result.stderr
    assert not (checkout / ".venv").exists()
