"""Programs of every shape GradGuard claims to handle, each checked two ways.

`tests/programs/cases/*.py` start with `# expect: KIND` and mark the raising line with
`# raises`.  GradGuard must agree with that label, and (when torch is installed) the
execution oracle must too: running the script under torch raises that error at that
line, or runs clean.  So a wrong expectation fails here instead of teaching the
analysis a wrong lesson.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gradguard.analysis import analyze
from gradguard.rules import ALL_RULES

HERE = Path(__file__).parent / "programs"
ORACLE = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "oracle.py"
PREDICTS = {r.code: r.predicts for r in ALL_RULES}
CASES = sorted(p.name for p in (HERE / "cases").glob("*.py"))


def expectation(name):
    lines = (HERE / "cases" / name).read_text().splitlines()
    kind = lines[0].split(":", 1)[1].strip()
    line = next((i for i, text in enumerate(lines, 1) if text.rstrip().endswith("# raises")), None)
    return kind, line


@pytest.mark.parametrize("name", CASES)
def test_gradguard_agrees_with_the_label(name):
    kind, line = expectation(name)
    found = {(f.span.line, PREDICTS[f.code]) for f in analyze((HERE / "cases" / name).read_text())
             if PREDICTS[f.code]}
    if kind == "clean":
        assert not found
    else:
        assert (line, kind) in found, f"expected {kind} at line {line}, found {sorted(found)}"


RUN_ALL = """
import json, os, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import oracle
print(json.dumps(oracle.run_all(sys.argv[2], sys.argv[3:])))
"""


@pytest.fixture(scope="module")
def oracle_results():
    """Run every program under torch, in a fresh interpreter: the oracle forks its
    children from a torch-loaded process, which must not be this (threaded) pytest."""
    if importlib.util.find_spec("torch") is None or not ORACLE.exists():
        pytest.skip("the execution oracle needs torch and ../shared/corpus/oracle.py")
    env = dict(os.environ, PYTHONHASHSEED="0", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               PYTHONWARNINGS="ignore", MPLBACKEND="Agg")
    proc = subprocess.run([sys.executable, "-c", RUN_ALL, str(ORACLE), str(HERE), *CASES], capture_output=True,
                          text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", CASES)
def test_torch_agrees_with_the_label(name, oracle_results):
    kind, line = expectation(name)
    result = oracle_results[name]
    assert result["kind"] == kind, result["message"]
    if kind != "clean":
        assert result["line"] == line
