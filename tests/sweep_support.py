"""`gradguard check` over the Python standard library and the installed torch package.

Each file is analysed or gets a GG000 record about the file itself: a syntax error (syntax
newer than this Python, or test data that is broken on purpose) or bytes that do not decode.
Any other GG000 (an internal error, a timeout), a traceback or any line on stderr is a
failure.  The two trees are checked by two processes at once, one per core; each file has a
30 s limit so one file cannot hang the sweep.  `tests/test_sweep.py` sweeps a seeded sample
of the files; `bench/bench_sweep.py` sweeps them all.
"""
from __future__ import annotations

import importlib.util
import json
import os
import random
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PER_FILE_SECONDS = 30
ROOTS = {
    "stdlib": sysconfig.get_paths()["stdlib"],
    "torch": importlib.util.find_spec("torch").submodule_search_locations[0],  # found, not imported
}
ALLOWED = re.compile(r"syntax error: |cannot decode: ")  # how a GG000 message may start
SKIP = ("site-packages", "__pycache__")


def files_of(root: str, share: float = 1.0, seed: int = 0) -> list[str]:
    """The `.py` files of a tree a walk takes, sorted; a seeded `share` of them."""
    found = sorted(str(p) for p in Path(root).rglob("*.py")
                   if not any(part in SKIP for part in p.relative_to(root).parts) and p.is_file())
    return found if share >= 1 else sorted(random.Random(seed).sample(found, max(1, round(len(found) * share))))


def sweep(work: Path, share: float = 1.0, seed: int = 0) -> dict[str, list[str]]:
    """Check `share` of each tree's files (all: the trees themselves) with two processes at
    once; per tree, what went wrong, one line each (empty: nothing did)."""
    config = work / "pyproject.toml"  # the defaults, whatever pyproject.toml lies above the trees
    config.write_text("")
    path = [str(REPO / "server"), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    runs = {}
    try:
        for name, root in ROOTS.items():
            targets = [root] if share >= 1 else files_of(root, share, seed)
            (work / f"{name}.files").write_text("\n".join(targets))
            command = [sys.executable, "-m", "gradguard", "check", "--format", "json", "--config", str(config),
                       "--timeout", str(PER_FILE_SECONDS), "--no-cache", *targets]
            with open(work / f"{name}.json", "w") as out, open(work / f"{name}.err", "w") as err:
                runs[name] = subprocess.Popen(command, stdout=out, stderr=err, env=env)
        codes = {name: process.wait(timeout=2400) for name, process in runs.items()}
    finally:
        for process in runs.values():
            if process.poll() is None:
                process.kill()
    problems = {}
    for name, root in ROOTS.items():
        stderr = (work / f"{name}.err").read_text().splitlines()
        problems[name] = [f"exit {codes[name]}"] if codes[name] not in (0, 1) else []
        records = json.loads((work / f"{name}.json").read_text()) if codes[name] in (0, 1) else []
        problems[name] += stderr + [f"{r['path']}:{r['line']}: {r['message']}" for r in records
                                    if r["code"] == "GG000" and not ALLOWED.match(r["message"])]
        problems[name] += [f"{r['path']}:{r['line']}:{r['column']}: outside the tree or the file" for r in records
                           if not (r["path"].startswith(root) and r["line"] >= 1 and r["column"] >= 1)]
    return problems
