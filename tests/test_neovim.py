"""Acceptance: a real editor.  Headless Neovim (Debian's `neovim` package, 0.7.2, which
cannot pull diagnostics, so the server pushes them) starts `gradguard lsp`, receives the
diagnostic for a corpus case, resolves and applies its preferred quick fix, and writes
the buffer; the written file must differ from the case by exactly that fix, parse, and
(under torch) run clean where the original raised.

The editor is driven by tests/nvim/gradguard_test.lua.  When `nvim` is missing the test
installs it with scripts/install_test_tools.sh if it can (root or passwordless sudo, apt);
otherwise it skips with the reason, except under CI (`CI` set), where it fails.
"""
from __future__ import annotations

import ast
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from corpus_support import CORPUS, run_oracle

REPO = Path(__file__).resolve().parents[1]
INIT = REPO / "tests" / "nvim" / "gradguard_test.lua"
INSTALL = REPO / "scripts" / "install_test_tools.sh"
CASE = CORPUS / "cases" / "s001_two_losses_2.py"
LINE, CODE = 17, "GG001"  # loss2.backward() through the graph loss1.backward() freed
FIX_LINE, FIXED = 16, "loss1.backward(retain_graph=True)"  # the preferred fix, on the line before
TIMEOUT_S = 60


def find_nvim() -> str:
    nvim = shutil.which("nvim")
    if nvim:
        return nvim
    root = hasattr(os, "geteuid") and os.geteuid() == 0
    why = "nvim is not installed; run scripts/install_test_tools.sh as root"
    if shutil.which("bash"):
        proc = subprocess.run(["bash", str(INSTALL)], check=False, capture_output=True, text=True, timeout=900)
        nvim = shutil.which("nvim")
        if proc.returncode == 0 and nvim:
            return nvim
        lines = (proc.stderr.strip() or proc.stdout.strip() or "no output").splitlines()
        why = f"{INSTALL.name} could not install nvim: {lines[-1]}"
        if root:
            pytest.fail(why)
    if os.environ.get("CI"):
        pytest.fail(f"{why} (CI must run scripts/install_test_tools.sh as root first)")
    pytest.skip(why)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_group(pgid: int) -> bool:
    """SIGKILL whatever is left of the editor's process group; True if anything was."""
    if not _group_alive(pgid):
        return False
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return True


@pytest.fixture(scope="module")
def edited(tmp_path_factory):
    """Run the editor once: (status JSON, original text, written text, seconds taken)."""
    if not CASE.exists():
        pytest.skip(f"no corpus case at {CASE}")
    nvim = find_nvim()
    work = tmp_path_factory.mktemp("nvim")
    case = work / CASE.name
    shutil.copyfile(CASE, case)
    result, status_file = work / "result.py", work / "status.json"
    home = work / "home"  # keep the editor off the user's config, cache and state
    env = {
        **os.environ,
        "XDG_CONFIG_HOME": str(home / "config"), "XDG_CACHE_HOME": str(home / "cache"),
        "XDG_DATA_HOME": str(home / "data"), "XDG_STATE_HOME": str(home / "state"),
        "GRADGUARD_PYTHON": sys.executable,
        "GRADGUARD_PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "server"), os.environ.get("PYTHONPATH")])),
        "GRADGUARD_EXPECT_LINE": str(LINE), "GRADGUARD_EXPECT_CODE": CODE,
        "GRADGUARD_RESULT": str(result), "GRADGUARD_STATUS": str(status_file),
        "GRADGUARD_TIMEOUT_MS": "30000",
    }
    command = [nvim, "--headless", "-n", "-i", "NONE", "--noplugin", "-u", str(INIT), case.name]
    started = time.monotonic()
    # Its own session, so that the editor and the server it starts can be cleaned up as a group.
    proc = subprocess.Popen(command, cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    timed_out = False
    try:
        out, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc.pid)
        out, err = proc.communicate()
    finally:
        leftovers = _kill_group(proc.pid)
    seconds = time.monotonic() - started

    status = json.loads(status_file.read_text()) if status_file.exists() else {}
    log = home / "cache" / "nvim" / "lsp.log"
    report = (f"status: {json.dumps(status, indent=1)}\nstdout: {out[-2000:]}\nstderr: {err[-3000:]}\n"
              f"lsp.log: {log.read_text()[-3000:] if log.exists() else '(none)'}")
    assert not timed_out, f"nvim ran past {TIMEOUT_S} s\n{report}"
    assert proc.returncode == 0, f"nvim exited with {proc.returncode}\n{report}"
    assert not leftovers, f"processes of the editor's group outlived it\n{report}"
    assert status.get("ok"), report
    return status, case.read_text(), result.read_text(), seconds


def test_neovim_gets_the_diagnostic_and_applies_the_quick_fix(edited):
    status, original, fixed, seconds = edited
    diag = status["diagnostic"]
    assert (diag["source"], diag["code"], diag["line"]) == ("gradguard", CODE, LINE)
    assert "a second time" in diag["message"]
    assert "retain_graph=True" in status["action"]
    assert status["resolved"]  # 0.7 resolves edits lazily (resolveSupport: ["edit"])
    assert status["server_exit"] == {"code": 0, "signal": 0}  # shut down cleanly by the editor

    lines = original.splitlines(keepends=True)
    assert lines[FIX_LINE - 1] == "loss1.backward()\n"
    lines[FIX_LINE - 1] = FIXED + "\n"
    assert fixed == "".join(lines)  # exactly the fix, nothing else
    ast.parse(fixed)
    # The editor sent the change and the server withdrew the diagnostic.
    assert not [d for d in status["diagnostics_after"] if d["code"] == CODE]
    assert seconds < TIMEOUT_S


def test_the_fixed_file_runs_clean_under_torch(edited, tmp_path):
    """The execution oracle (in a fresh interpreter, as in test_programs.py): the case
    raises at the flagged line, the file the editor wrote runs clean."""
    _, original, fixed, _ = edited
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "original.py").write_text(original)
    (tmp_path / "cases" / "fixed.py").write_text(fixed)
    results = run_oracle(tmp_path, ["original.py", "fixed.py"], timeout=300)
    assert (results["original.py"]["kind"], results["original.py"]["line"]) == ("freed_graph", LINE)
    assert results["fixed.py"]["kind"] == "clean", results["fixed.py"]["message"]
