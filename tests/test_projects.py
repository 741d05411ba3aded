"""Projects of several modules, whose bug lives in, or passes through, an imported module.

`tests/projects/cases/FLOW/{crash,fixed}/train.py` import the project's own modules next to
them (or a package).  Each `train.py` starts with `# expect: KIND` and marks the raising line
with `# raises`; the execution oracle runs it under torch to confirm the label, GradGuard
must agree with it through the CLI, and a cause in an imported module is a related location
in that module.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from corpus_support import assert_torch_agrees, expectation, run_oracle
from gradguard.api import check_file, check_source
from gradguard.cache import Cache, check_cached
from gradguard.config import Config
from gradguard import workspace
from gradguard.rules import ALL_RULES

HERE = Path(__file__).parent / "projects"
PREDICTS = {r.code: r.predicts for r in ALL_RULES}
MAINS = sorted(str(p.relative_to(HERE / "cases")) for p in (HERE / "cases").glob("*/*/train.py"))
# where the cause lies in the imported module: the related location must point there
CAUSE_IN_MODULE = {"features_helper/crash/train.py": "features.py", "block_inplace/crash/train.py": "blocks.py"}


@pytest.mark.parametrize("main", MAINS)
def test_gradguard_follows_the_imports(main):
    kind, line = expectation(HERE / "cases" / main)
    result = check_file(HERE / "cases" / main, Config())
    assert result.error is None
    found = {(f.span.line, PREDICTS[f.code]) for f in result.findings if PREDICTS[f.code]}
    assert found == (set() if kind == "clean" else {(line, kind)})


@pytest.mark.parametrize("main", sorted(CAUSE_IN_MODULE))
def test_the_cause_is_shown_in_the_imported_module(main):
    [finding] = check_file(HERE / "cases" / main, Config()).findings
    module = (HERE / "cases" / main).parent / CAUSE_IN_MODULE[main]
    elsewhere = [r.span for r in finding.related if r.span.path is not None]
    assert elsewhere and all(Path(sp.path) == module.resolve() for sp in elsewhere)
    text = module.read_text().splitlines()
    # the span is the module's own text: the expression the message names
    assert any(f"`{text[sp.line - 1][sp.column:sp.end_column]}`" in finding.message for sp in elsewhere)
    assert f"of {module.name}" in finding.message  # "(line 6 of features.py)"


# where the error is raised inside the imported module: reported at the call, the module's raising line related
RAISED_IN_MODULE = {"ema_teacher_module/crash/train.py": ("ema.py", "t.mul_(decay)"),
                    "step_helper_module/crash/train.py": ("steps.py", "loss.backward()")}


@pytest.mark.parametrize("main", sorted(RAISED_IN_MODULE))
def test_an_error_raised_inside_an_imported_module_is_reported_at_the_call(main):
    [finding] = check_file(HERE / "cases" / main, Config()).findings
    name, raising = RAISED_IN_MODULE[main]
    module = (HERE / "cases" / main).parent / name
    call = (HERE / "cases" / main).read_text().splitlines()[finding.span.line - 1]
    assert finding.span.path is None and call.strip().endswith("# raises")
    first = finding.related[0]
    assert Path(first.span.path) == module.resolve() and first.message == "raises here"
    assert raising in module.read_text().splitlines()[first.span.line - 1]
    assert f"at line {first.span.line} of {name}" in finding.message


def test_modules_forgotten_to_bound_memory_are_read_again_alike(monkeypatch):
    """A process keeps parsed modules up to `KEPT_TEXT` of text: past it, the oldest are parsed
    again when imported again, with the same findings."""
    monkeypatch.setattr(workspace, "KEPT_TEXT", 1)  # every module but the last loaded is forgotten
    ws = workspace.Workspace(HERE / "cases")
    for main in MAINS:
        kind, line = expectation(HERE / "cases" / main)
        result = check_source((HERE / "cases" / main).read_text(), str(HERE / "cases" / main), Config(), workspace=ws)
        assert result.error is None
        assert {(f.span.line, PREDICTS[f.code]) for f in result.findings if PREDICTS[f.code]} == \
            (set() if kind == "clean" else {(line, kind)})
        assert len(ws._parsed) == 1


def test_follow_imports_false_analyses_the_file_alone():
    config = Config(follow_imports=False)
    result = check_file(HERE / "cases" / "block_inplace" / "crash" / "train.py", config)
    assert result.findings == [] and result.modules == ()


def test_a_text_that_is_no_file_follows_no_import(monkeypatch):
    """An editor's untitled document has no directory: its imports must not resolve against
    the directory the server happens to run in."""
    project = HERE / "cases" / "block_inplace" / "crash"
    monkeypatch.chdir(project)
    text = (project / "train.py").read_text()
    assert [f.code for f in check_source(text, "train.py", Config()).findings] == ["GG002"]
    assert check_source(text, "untitled:Untitled-1", Config()).findings == []


def test_the_cli_prints_the_module_location(tmp_path):
    project = HERE / "cases" / "features_helper" / "crash"
    proc = subprocess.run([sys.executable, "-m", "gradguard", "check", "--no-cache", "--format", "json", "train.py"],
                          cwd=project, capture_output=True, text=True)
    [record] = json.loads(proc.stdout)
    assert record["path"] == "train.py" and record["related"][-1]["path"] == "features.py"
    assert record["related"][-1]["line"] == 6
    text = subprocess.run([sys.executable, "-m", "gradguard", "check", "--no-cache", "train.py"],
                          cwd=project, capture_output=True, text=True).stdout
    assert "\n    features.py:6:12: " in text


def test_a_changed_module_changes_the_cached_result(tmp_path):
    """The cache keeps a result only while the modules it read are unchanged."""
    project = tmp_path / "p"
    shutil.copytree(HERE / "cases" / "block_inplace" / "crash", project)
    cache = Cache(tmp_path, Config())
    assert [f.code for f in check_cached(project / "train.py", Config(), cache).findings] == ["GG002"]
    blocks = project / "blocks.py"
    blocks.write_text(blocks.read_text().replace("gate *= 2.0", "gate = gate * 2.0"))
    os.utime(blocks, ns=(1, 1))  # a different modification time, whatever the clock's resolution
    assert check_cached(project / "train.py", Config(), cache).findings == []


def test_a_module_that_gains_a_backward_changes_the_cached_result_of_a_file_without_one(tmp_path):
    """A file without a sink of its own is analysed only if a module it imports has one: the
    cached result of the file depends on that module's text too."""
    project = tmp_path / "p"
    shutil.copytree(HERE / "cases" / "step_helper_module" / "crash", project)
    steps = project / "steps.py"
    text = steps.read_text()
    steps.write_text(text.replace("    loss.backward()\n", "    loss.sum()\n"))
    cache = Cache(tmp_path, Config())
    assert check_cached(project / "train.py", Config(), cache).findings == []
    steps.write_text(text)
    os.utime(steps, ns=(1, 1))
    assert [f.code for f in check_cached(project / "train.py", Config(), cache).findings] == ["GG001"]


def test_an_import_cycle_and_a_missing_module_are_opaque(tmp_path):
    (tmp_path / "a.py").write_text("from b import g\n\n\ndef f(x):\n    return g(x)\n")
    (tmp_path / "b.py").write_text("from a import f\nfrom nowhere import h\n\n\ndef g(x):\n    return h(f(x))\n")
    (tmp_path / "train.py").write_text(
        "import torch\nfrom a import f\n\nw = torch.ones(2, requires_grad=True)\nloss = f(w).sum()\nloss.backward()\n")
    result = check_file(tmp_path / "train.py", Config())
    assert result.error is None and result.findings == []


@pytest.fixture(scope="module")
def oracle_results():
    return run_oracle(HERE, MAINS)


@pytest.mark.parametrize("main", MAINS)
def test_torch_agrees_with_the_label(main, oracle_results):
    assert_torch_agrees(oracle_results[main], *expectation(HERE / "cases" / main))
