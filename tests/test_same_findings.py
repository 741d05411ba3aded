"""Same text, same findings: the verdict on a file does not depend on how a run is made.

One set of files (the test programs, the multi-module projects with their modules, the
corpus) is checked by `gradguard check` in several groupings and orders, with one process
and with several, with and without the cache, and under other hash seeds (the order of sets
of strings); every run must print the same predicting findings, message for message.  A
module cache, class statics or budgets shared by the files one process analyses would show
here.  That the language server publishes what the command line prints is
`tests/test_lsp.py::test_the_server_reports_what_the_command_line_reports`.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from corpus_support import CORPUS
from gradguard.rules import ALL_RULES

HERE = Path(__file__).parent
PREDICTS = {r.code: r.predicts for r in ALL_RULES}


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """The files, copied into a project of their own (its cache stays there)."""
    root = tmp_path_factory.mktemp("same")
    shutil.copytree(HERE / "programs" / "cases", root / "programs")
    shutil.copytree(HERE / "projects" / "cases", root / "projects")
    shutil.copytree(CORPUS / "cases", root / "corpus")
    (root / "pyproject.toml").write_text("[tool.gradguard]\n")
    return root


def files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.py"))


def check(root: Path, paths: list[str], *args: str, seed: str = "0") -> set:
    """The predicting findings `gradguard check` prints for `paths` (relative to `root`)."""
    proc = subprocess.run([sys.executable, "-m", "gradguard", "check", "--output-format", "json", "--exit-zero",
                           *args, *paths], cwd=root, capture_output=True, text=True,
                          env={**os.environ, "PYTHONHASHSEED": seed})
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["errors"] == []
    return {(f["path"], f["line"], f["column"], f["code"], f["message"])
            for f in report["findings"] if PREDICTS.get(f["code"])}


@pytest.fixture(scope="module")
def reference(project) -> set:
    found = check(project, files(project), "--no-cache", "-j", "1")
    assert len({f[0] for f in found}) >= 50  # enough files with findings for the comparisons to mean something
    return found


def test_any_grouping_of_the_files(project, reference):
    """The files in interleaved groups, each group in a process of its own, the projects'
    modules apart from their importers: other files analysed before one in the same process
    (their modules parsed, their classes seen) change nothing."""
    paths = files(project)
    mains = [p for p in paths if p.endswith("train.py")]
    rest = [p for p in paths if not p.endswith("train.py")]
    found: set = set()
    for seed, group in enumerate((mains[0::2], mains[1::2], rest[0::2], rest[1::2]), start=3):
        found |= check(project, group, "--no-cache", "-j", "1", seed=str(seed))
    assert found == reference


def test_another_order_on_several_processes_with_the_cache_cold_and_warm(project, reference):
    """The files shuffled, on two processes, under another hash seed, with a cold cache (every
    file analysed, its entry written); then reversed on one process from the warm cache."""
    paths = files(project)
    cache = project / ".gradguard_cache"
    shutil.rmtree(cache, ignore_errors=True)
    try:
        assert check(project, random.Random(19).sample(paths, len(paths)), "-j", "2", seed="7") == reference
        assert (cache / ".gitignore").read_text().splitlines()[-1] == "*"
        entries = list(cache.rglob("*.json"))
        assert len(entries) == len(paths)  # one per file, none of them failed
        assert all(json.loads(e.read_text())["path"] for e in entries)  # JSON: nothing a checkout could smuggle in
        assert check(project, paths[::-1], "-j", "1", seed="8") == reference
    finally:
        shutil.rmtree(cache, ignore_errors=True)



def test_joins_do_not_depend_on_their_order():
    """A value that grows past what the engine keeps drops atoms; the set iteration order that
    decides which atoms meet first follows memory addresses, so every order of the same joins
    must give one value (before, of 25 methods joined one by one, those joined after the last
    collapse stayed, and a wrapper's `self.base` was any of 32 modules in some runs only)."""
    from gradguard.engine.values import Const, Obj, join

    atoms = [frozenset({Const(i)}) for i in range(20)] + [frozenset({Obj(("o", i), "module")}) for i in range(3)]
    outcomes = set()
    for seed in range(20):
        order = atoms[:]
        random.Random(seed).shuffle(order)
        out = frozenset()
        for v in order:
            out = join(out, v)
        outcomes.add(out)
    assert len(outcomes) == 1
