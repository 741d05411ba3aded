"""What a user installs: the wheel, in a fresh environment, without torch.

GradGuard reads code and never imports torch, so `pip install gradguard` must not pull in
torch (a multi-gigabyte CUDA wheel on most machines); only the test extra asks for it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

import gradguard

REPO = Path(__file__).resolve().parents[1]


def test_one_version_everywhere():
    """The wheel takes its version from `gradguard.__version__`; the extension's manifest must agree."""
    pyproject = (REPO / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject and 'version = { attr = "gradguard.__version__" }' in pyproject
    assert json.loads((REPO / "package.json").read_text())["version"] == gradguard.__version__


@pytest.mark.slow
def test_the_wheel_installs_without_torch_and_checks(tmp_path):
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "-q", "-w", str(dist)],
                   check=True, capture_output=True, timeout=300)
    (wheel,) = dist.glob("gradguard-*.whl")
    env_dir = tmp_path / "env"
    venv.create(env_dir, with_pip=True)
    python = env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    subprocess.run([str(python), "-m", "pip", "install", "-q", str(wheel)], check=True, capture_output=True,
                   timeout=600)

    installed = subprocess.run([str(python), "-m", "pip", "list", "--format", "json"], check=True,
                               capture_output=True, text=True).stdout
    names = {p["name"].lower() for p in json.loads(installed)}
    assert "gradguard" in names and "torch" not in names and "jedi" not in names

    example = REPO / "examples" / "rnn_hidden_state.py"
    out = subprocess.run([str(python), "-m", "gradguard", "check", str(example)], capture_output=True, text=True,
                         cwd=tmp_path, timeout=120)
    assert out.returncode == 1 and " GG001 [error] " in out.stdout, out.stdout + out.stderr
    version = subprocess.run([str(python), "-m", "gradguard", "--version"], capture_output=True, text=True)
    assert version.stdout.strip() == f"gradguard {gradguard.__version__}"
