"""The repository's own CI integrations, run as their hosts run them: the GitHub Action's
steps under bash (its install step: `tests/test_install.py`), and the pre-commit hooks
through `pre-commit try-repo` in a fresh git repository."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
CRASH = REPO / "examples" / "rnn_hidden_state.py"
ACTION = yaml.safe_load((REPO / "action.yml").read_text())
INPUT = re.compile(r"\$\{\{\s*inputs\.([\w-]+)\s*\}\}")


def run_action(workdir: Path, bindir: Path, inputs: dict | None = None, install: bool = False):
    """Run the composite action's steps in `workdir` as the runner would: each step's `run`
    under bash with its `env` (inputs substituted), `if: inputs.X != ''` honoured, stopping
    at the first failing step.  Returns the last step's completed process."""
    given = {name: spec.get("default", "") for name, spec in ACTION["inputs"].items()} | (inputs or {})
    env = {**os.environ, "GITHUB_ACTION_PATH": str(REPO), "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}
    proc = None
    for step in ACTION["runs"]["steps"]:
        if step["name"].startswith("Install") and not install:
            continue
        condition = re.fullmatch(r"inputs\.([\w-]+) != ''", step.get("if", ""))
        if condition and not given[condition.group(1)]:
            continue
        step_env = {key: INPUT.sub(lambda m: given[m.group(1)], value) for key, value in step.get("env", {}).items()}
        proc = subprocess.run(["bash", "-eo", "pipefail", "-c", step["run"]], cwd=workdir, env={**env, **step_env},
                              capture_output=True, text=True, timeout=600)
        if proc.returncode:
            break
    return proc


def test_the_action_writes_sarif_and_annotates(tmp_path):
    shutil.copy(CRASH, tmp_path / "train.py")
    proc = run_action(tmp_path, Path(sys.executable).parent)
    assert proc.returncode == 1
    assert re.search(r"^::error file=train\.py,line=28,col=5,.*title=GG001", proc.stdout, re.M), proc.stdout
    sarif = json.loads((tmp_path / "gradguard.sarif").read_text())
    assert sarif["version"] == "2.1.0"
    assert [r["ruleId"] for r in sarif["runs"][0]["results"]] == ["GG001"]


def test_the_action_passes_a_clean_tree_and_can_skip_sarif(tmp_path):
    (tmp_path / "ok.py").write_text("import torch\nx = torch.ones(2, requires_grad=True)\n(x * 2).sum().backward()\n")
    proc = run_action(tmp_path, Path(sys.executable).parent, {"sarif-file": ""})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not (tmp_path / "gradguard.sarif").exists()


@pytest.mark.slow
def test_pre_commit_hooks(tmp_path):
    """Both hooks in one `try-repo` (one environment built for them): each reports the crash;
    `gradguard-fix` leaves the file alone, its one fix being unsafe (it changes which
    gradients flow)."""
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(CRASH, project / "train.py")
    (project / "notes.txt").write_text("not python\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    for command in (["init", "-q"], ["add", "."], ["commit", "-qm", "init"]):
        subprocess.run(git + command, cwd=project, check=True, capture_output=True)
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "cache")}
    pre_commit = [sys.executable, "-m", "pre_commit", "try-repo", str(REPO), "--all-files", "--color", "never"]
    proc = subprocess.run(pre_commit, cwd=project, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    hooks = re.findall(r"^- hook id: (\S+)$", proc.stdout, re.M)
    assert hooks == ["gradguard", "gradguard-fix"], proc.stdout
    assert proc.stdout.count("train.py:28:5: GG001") == 2, proc.stdout
    assert (project / "train.py").read_bytes() == CRASH.read_bytes()
