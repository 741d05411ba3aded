"""Programs whose error torch reports wrapped in another's message, labelled by running them.

`module.load_state_dict` catches what a copy into a parameter or buffer raises and raises
"Error(s) in loading state_dict ..." with the cause on a later line, which the shared oracle
(first line only) cannot classify: these programs are run here, the whole message read."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gradguard.analysis import analyze
from gradguard.explain import classify
from corpus_support import expectation

HERE = Path(__file__).parent / "programs" / "wrapped"
PROGRAMS = sorted(p.name for p in HERE.glob("*.py"))


@pytest.mark.parametrize("name", PROGRAMS)
def test_torch_agrees_with_the_label(name):
    if importlib.util.find_spec("torch") is None:
        pytest.skip("running the program needs torch")
    kind, line = expectation(HERE / name)
    env = dict(os.environ, PYTHONHASHSEED="0", OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    proc = subprocess.run([sys.executable, str(HERE / name)], capture_output=True, text=True, env=env, timeout=300)
    if kind == "clean":
        assert proc.returncode == 0, proc.stderr[-2000:]
        return
    assert proc.returncode != 0
    assert classify(proc.stderr) == kind, proc.stderr[-2000:]
    assert f'"{HERE / name}", line {line},' in proc.stderr  # the innermost line of the program


@pytest.mark.parametrize("name", PROGRAMS)
def test_gradguard_agrees_with_the_label(name):
    kind, line = expectation(HERE / name)
    found = {(f.span.line, f.predicts) for f in analyze((HERE / name).read_text(), path=str(HERE / name))
             if f.predicts}
    assert found == (set() if kind == "clean" else {(line, kind)})
