"""The corpus and the execution oracle (../shared/corpus), as the tests use them.

The oracle forks its children from a torch-loaded process, which must not be the
(threaded) pytest process: `run_oracle` runs it in a fresh interpreter."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
ORACLE = CORPUS / "oracle.py"
RUN_ALL = """
import json, os, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import oracle
print(json.dumps(oracle.run_all(sys.argv[2], sys.argv[3:])))
"""


def manifest() -> list[dict]:
    """The corpus's cases (skips the test when the corpus is not beside the repository)."""
    path = CORPUS / "manifest.json"
    if not path.exists():
        pytest.skip(f"no corpus at {CORPUS}")
    return json.loads(path.read_text())


def run_oracle(directory: Path, names, timeout: int = 600) -> dict:
    """Run `directory/cases/NAME` under torch for each name: {name: {"kind", "line", "message"}}."""
    if importlib.util.find_spec("torch") is None or not ORACLE.exists():
        pytest.skip("the execution oracle needs torch and ../shared/corpus/oracle.py")
    env = dict(os.environ, PYTHONHASHSEED="0", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               PYTHONWARNINGS="ignore", MPLBACKEND="Agg")
    proc = subprocess.run([sys.executable, "-c", RUN_ALL, str(ORACLE), str(directory), *names],
                          capture_output=True, text=True, env=env, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return {name: with_kind(r) for name, r in json.loads(proc.stdout.strip().splitlines()[-1]).items()}


def with_kind(result: dict) -> dict:
    """The oracle's outcome, its kind read from the message with the markers of every kind a
    rule predicts: the shared oracle knows the first four and calls the rest `other_error`."""
    from gradguard.explain import classify

    kind = classify(result.get("message") or "") if result.get("kind") == "other_error" else None
    return dict(result, kind=kind) if kind else result


def expectation(path: Path) -> tuple[str, int | None]:
    """A labelled program's `# expect: KIND` (first line) and the line marked `# raises`."""
    lines = path.read_text().splitlines()
    kind = lines[0].split(":", 1)[1].strip()
    return kind, next((i for i, text in enumerate(lines, 1) if text.rstrip().endswith("# raises")), None)


def assert_torch_agrees(result: dict, kind: str, line: int | None) -> None:
    """The execution oracle's outcome for a labelled program is its label."""
    assert result["kind"] == kind, result["message"]
    if kind != "clean":
        assert result["line"] == line
