"""What a user installs: the package, in a fresh environment, without torch.

GradGuard reads code and never imports torch, so `pip install gradguard` must not pull in
torch (a multi-gigabyte CUDA wheel on most machines); only the test extra asks for it.  The
install is the GitHub Action's own (`pip install` of the source, which builds the wheel), so
one environment serves both.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import venv
from pathlib import Path

import pytest

import gradguard
from test_ci_integrations import run_action

REPO = Path(__file__).resolve().parents[1]


def test_one_version_everywhere():
    """The wheel takes its version from `gradguard.__version__`; the extension's manifest must agree."""
    pyproject = (REPO / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject and 'version = { attr = "gradguard.__version__" }' in pyproject
    assert json.loads((REPO / "package.json").read_text())["version"] == gradguard.__version__


@pytest.mark.slow
def test_the_action_installs_the_package_without_torch_and_checks(tmp_path):
    """The GitHub Action's install step (`pip install` of its own source, which builds the
    wheel) into a fresh environment, then its other steps with that environment's
    `gradguard`: the crash is annotated, torch did not come with it, and jedi (which finds
    the user's code the interpreter imports from outside the project) did."""
    env_dir = tmp_path / "env"
    venv.create(env_dir, with_pip=True)
    bindir = env_dir / ("Scripts" if os.name == "nt" else "bin")
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(REPO / "examples" / "rnn_hidden_state.py", work / "train.py")
    proc = run_action(work, bindir, install=True)
    assert proc.returncode == 1 and "title=GG001" in proc.stdout, proc.stdout + proc.stderr
    assert (bindir / "gradguard").exists()

    python = str(bindir / "python")
    installed = subprocess.run([python, "-m", "pip", "list", "--format", "json"], check=True,
                               capture_output=True, text=True).stdout
    names = {p["name"].lower() for p in json.loads(installed)}
    assert "gradguard" in names and "torch" not in names and "jedi" in names
    version = subprocess.run([python, "-m", "gradguard", "--version"], capture_output=True, text=True, cwd=work)
    assert version.stdout.strip() == f"gradguard {gradguard.__version__}"
