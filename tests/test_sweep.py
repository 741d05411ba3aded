"""Acceptance: `gradguard check` gets through the whole standard library and the torch package.

Each file is analysed or gets a GG000 record about the file itself: a syntax error (syntax
newer than this Python, or test data that is broken on purpose) or bytes that do not decode.
Any other GG000 (an internal error, a timeout), a traceback or any line on stderr fails the test.  The
two trees are checked by two processes at once, one per core; each file has a 30 s limit so
one file cannot hang the sweep.  Slow (see the README for the time), so marked `slow`; the
README's test command and CI run it.
"""
import importlib.util
import json
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PER_FILE_SECONDS = 30
ROOTS = {
    "stdlib": sysconfig.get_paths()["stdlib"],
    "torch": importlib.util.find_spec("torch").submodule_search_locations[0],  # found, not imported
}
ALLOWED = re.compile(r"syntax error: |cannot decode: ")  # how a GG000 message may start


@pytest.mark.slow
def test_check_survives_stdlib_and_torch(tmp_path):
    config = tmp_path / "pyproject.toml"  # the defaults, whatever pyproject.toml lies above the trees
    config.write_text("")
    path = [str(REPO / "server"), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    runs = {}
    try:
        for name, root in ROOTS.items():
            command = [sys.executable, "-m", "gradguard", "check", "--format", "json", "--config", str(config),
                       "--timeout", str(PER_FILE_SECONDS), root]
            with open(tmp_path / f"{name}.json", "w") as out, open(tmp_path / f"{name}.err", "w") as err:
                runs[name] = subprocess.Popen(command, stdout=out, stderr=err, env=env)
        codes = {name: process.wait(timeout=2400) for name, process in runs.items()}
    finally:
        for process in runs.values():
            if process.poll() is None:
                process.kill()

    for name, root in ROOTS.items():
        stderr = (tmp_path / f"{name}.err").read_text().splitlines()
        assert codes[name] in (0, 1), f"{name}: exit {codes[name]}: {stderr[-5:]}"
        records = json.loads((tmp_path / f"{name}.json").read_text())
        unexpected = stderr + [f"{r['path']}:{r['line']}: {r['message']}" for r in records
                               if r["code"] == "GG000" and not ALLOWED.match(r["message"])]
        assert not unexpected, f"{name}: {len(unexpected)} unexpected reports, first: {unexpected[:10]}"
        assert all(r["path"].startswith(root) and r["line"] >= 1 and r["column"] >= 1 for r in records)
