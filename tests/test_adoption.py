"""Adopting GradGuard on an existing codebase, run as a user runs it (`python -m gradguard`):
which files a walk takes (git's ignore files, `exclude`, `--force-exclude`), each file's own
project settings, `per-file-ignores`, `# gradguard: noqa`, `--add-noqa`, unused noqa
comments (GG100) and the progress line.  Every input is a crashing program of the corpus, so
a file that is checked shows up with a finding.
"""
from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
from gradguard.api import check_file
from gradguard.config import load_config
from gradguard.ignore import Patterns
from test_cli import REPO, gradguard, write

CASES = Path(__file__).parent / "programs" / "cases"
GG001 = (CASES / "double_backward_mul_by_tensor.py").read_text()  # GG001 on line 10, `# raises` there
GG002 = (CASES / "inplace_relu_saved.py").read_text()  # GG002 on line 8


def flagged(root: Path, *args: str) -> dict[str, set[str]]:
    """The files with findings, and their codes, of `gradguard check ARGS` run in `root`."""
    run = gradguard("check", "--format", "json", "--no-cache", *args, cwd=root)
    assert run.returncode in (0, 1), run.stderr
    out: dict[str, set[str]] = {}
    for record in json.loads(run.stdout):
        out.setdefault(Path(record["path"]).as_posix(), set()).add(record["code"])
    return out


def repository(root: Path, files: dict[str, str]) -> Path:
    """A git work tree (a `.git` directory is all git's ignore rules need) holding `files`."""
    (root / ".git" / "info").mkdir(parents=True)
    for name, text in files.items():
        write(root / name, text)
    return root


# ------------------------------------------------------------------ gitignore
GITIGNORE_TREE = {
    ".gitignore": "build/\n*.gen.py\n!keep.gen.py\n/top_only.py\ndata/**/raw/\n",
    ".git/info/exclude": "private/\n",
    "sub/.gitignore": "local.py\n!sub_keep.gen.py\n",
    "train.py": GG001,
    "build/out.py": GG001,
    "sub/build/out.py": GG001,  # unanchored: `build/` matches at any depth
    "model.gen.py": GG001,
    "keep.gen.py": GG001,  # re-included by `!keep.gen.py`
    "sub/sub_keep.gen.py": GG001,  # re-included by the deeper .gitignore
    "top_only.py": GG001,  # anchored by the leading `/`: only here
    "sub/top_only.py": GG001,
    "data/a/b/raw/x.py": GG001,  # `**` spans directories
    "data/a/x.py": GG001,
    "private/p.py": GG001,  # .git/info/exclude
    "sub/local.py": GG001,  # the nested .gitignore's pattern is relative to its own directory
    "local.py": GG001,
}
WALKED = {"train.py", "keep.gen.py", "sub/sub_keep.gen.py", "sub/top_only.py", "data/a/x.py", "local.py"}


def test_a_walk_passes_over_what_git_ignores(tmp_path):
    root = repository(tmp_path, GITIGNORE_TREE)
    assert set(flagged(root, ".")) == WALKED
    everything = {name for name in GITIGNORE_TREE if name.endswith(".py")}
    assert set(flagged(root, ".", "--no-respect-gitignore")) == everything
    write(root / "pyproject.toml", "[tool.gradguard]\nrespect-gitignore = false\n")
    assert set(flagged(root, ".")) == everything


def test_a_walk_of_a_subdirectory_still_reads_the_ignore_files_above_it(tmp_path):
    root = repository(tmp_path, GITIGNORE_TREE)
    assert set(flagged(root, "sub")) == {"sub/sub_keep.gen.py", "sub/top_only.py"}


def test_a_directory_named_on_the_command_line_is_walked_even_when_ignored(tmp_path):
    root = repository(tmp_path, GITIGNORE_TREE)
    assert set(flagged(root, "build", "private/p.py")) == {"build/out.py", "private/p.py"}


def test_ignore_files_count_only_inside_a_git_repository(tmp_path):
    """As for git and ruff: an exported tarball (no `.git`) is walked whole."""
    for name, text in GITIGNORE_TREE.items():
        if not name.startswith(".git/"):
            write(tmp_path / name, text)
    assert "build/out.py" in flagged(tmp_path, ".")


def test_directory_only_patterns_and_negation_follow_git():
    base = Path("/project")
    patterns = Patterns(base, ["build/", "*.log", "!keep.log", "logs/*", "!logs/keep.py"])
    assert patterns.decide(base / "build", is_dir=True) is True
    assert patterns.decide(base / "build", is_dir=False) is None  # a file named build: not a directory
    assert patterns.decide(base / "a" / "build" / "x.py", is_dir=False) is None  # decided at `build/` itself
    assert patterns.covers(base / "a" / "build" / "x.py", is_dir=False)
    assert patterns.decide(base / "keep.log", is_dir=False) is False
    assert patterns.decide(base / "logs" / "keep.py", is_dir=False) is False
    assert patterns.covers(base / "logs" / "a.py", is_dir=False) and not patterns.covers(base / "logs" / "keep.py",
                                                                                         is_dir=False)


def test_exclude_has_gitignore_semantics(tmp_path):
    write(tmp_path / "pyproject.toml", '[tool.gradguard]\nexclude = ["/gen", "*_pb2.py", "legacy/**", "!legacy/ok.py"]\n')
    for name in ("gen/a.py", "sub/gen/a.py", "proto_pb2.py", "sub/x_pb2.py", "legacy/old.py", "legacy/ok.py", "t.py"):
        write(tmp_path / name, GG001)
    assert set(flagged(tmp_path, ".")) == {"sub/gen/a.py", "legacy/ok.py", "t.py"}


# ------------------------------------------------------------------ force-exclude
def test_force_exclude_applies_exclude_and_gitignore_to_named_files(tmp_path):
    root = repository(tmp_path, {".gitignore": "ignored.py\nbuild/\n", "pyproject.toml":
                                 '[tool.gradguard]\nexclude = ["generated/"]\n'})
    named = ["generated/deep/x.py", "ignored.py", "build/y.py", "ok.py"]
    for name in named:
        write(root / name, GG001)
    assert set(flagged(root, *named)) == set(named)  # named files are checked...
    assert set(flagged(root, "--force-exclude", *named)) == {"ok.py"}  # ...unless forced out
    assert set(flagged(root, "--force-exclude", "generated")) == set()  # a named directory too
    write(root / "pyproject.toml", '[tool.gradguard]\nexclude = ["generated/"]\nforce-exclude = true\n')
    assert set(flagged(root, *named)) == {"ok.py"}
    assert set(flagged(root, "--no-respect-gitignore", *named)) == {"ok.py", "ignored.py", "build/y.py"}
    stdin = gradguard("check", "--stdin-filename", "generated/z.py", cwd=root, stdin=GG001)
    assert (stdin.returncode, stdin.stdout) == (0, "No problems found in 0 files.\n")


# ------------------------------------------------------------------ per-file settings
def test_each_file_has_the_settings_of_its_own_project(tmp_path):
    """The nearest pyproject.toml with [tool.gradguard], as the editor finds it; `--config`
    overrides them all, and the command line's options apply on top of each."""
    write(tmp_path / "pyproject.toml", '[tool.gradguard]\nignore = ["GG001"]\nexclude = ["skipped.py"]\n')
    write(tmp_path / "inherits" / "pyproject.toml", '[project]\nname = "inherits"\n')  # no table: the root's
    write(tmp_path / "own" / "pyproject.toml", '[tool.gradguard]\nseverity = { GG001 = "warning" }\n')
    files = ["root.py", "inherits/a.py", "own/b.py", "own/deep/c.py", "skipped.py", "own/skipped.py"]
    for name in files:
        write(tmp_path / name, GG001 + GG002.replace("import torch\n", ""))
    expected = {"root.py": {"GG002"}, "inherits/a.py": {"GG002"}, "own/b.py": {"GG001", "GG002"},
                "own/deep/c.py": {"GG001", "GG002"}, "own/skipped.py": {"GG001", "GG002"}}
    assert flagged(tmp_path, ".") == expected
    assert flagged(tmp_path / "own", ".") == {"b.py": {"GG001", "GG002"}, "deep/c.py": {"GG001", "GG002"},
                                              "skipped.py": {"GG001", "GG002"}}
    for name, codes in expected.items():  # what the language server shows for the file
        path = tmp_path / name
        assert {f.code for f in check_file(path, load_config(path)).findings} == codes, name
    assert flagged(tmp_path, ".", "--ignore", "GG002") == {"own/b.py": {"GG001"}, "own/deep/c.py": {"GG001"},
                                                           "own/skipped.py": {"GG001"}}
    write(tmp_path / "all.toml", "[tool.gradguard]\n")
    assert flagged(tmp_path, ".", "--config", "all.toml") == {name: {"GG001", "GG002"} for name in files}
    run = gradguard("check", "--format", "json", ".", cwd=tmp_path)
    assert [r["severity"] for r in json.loads(run.stdout) if r["path"] == "own/b.py" and r["code"] == "GG001"] \
        == ["warning"]


def test_the_cache_follows_each_projects_settings(tmp_path):
    write(tmp_path / "own" / "pyproject.toml", "[tool.gradguard]\n")
    write(tmp_path / "own" / "b.py", GG001)
    first = gradguard("check", "--format", "json", ".", cwd=tmp_path)
    assert (tmp_path / "own" / ".gradguard_cache").is_dir()  # next to the pyproject.toml the settings came from
    assert gradguard("check", "--format", "json", ".", cwd=tmp_path).stdout == first.stdout != "[]\n"
    write(tmp_path / "own" / "pyproject.toml", '[tool.gradguard]\nper-file-ignores = { "b.py" = ["GG001"] }\n')
    assert gradguard("check", "--format", "json", ".", cwd=tmp_path).stdout == "[]\n"


def test_per_file_ignores(tmp_path):
    write(tmp_path / "pyproject.toml", """[tool.gradguard]
per-file-ignores = { "tests/**" = ["GG001"], "scripts/*.py" = ["ALL"], "notebooks/" = ["GG0"] }
""")
    for name in ("tests/deep/t.py", "scripts/s.py", "scripts/deep/s.py", "notebooks/n.py", "train.py"):
        write(tmp_path / name, GG001 + GG002.replace("import torch\n", ""))
    assert flagged(tmp_path, ".") == {"tests/deep/t.py": {"GG002"}, "scripts/deep/s.py": {"GG001", "GG002"},
                                      "train.py": {"GG001", "GG002"}}
    # relative to the pyproject.toml's directory, wherever the command runs
    assert flagged(tmp_path / "tests", ".") == {"deep/t.py": {"GG002"}}


@pytest.mark.parametrize("value", ['["tests/**"]', '{ "tests/**" = "GG001" }', '{ "tests/**" = [1] }',
                                   '{ "tests/**" = ["XX1"] }'])
def test_bad_per_file_ignores_are_one_line(tmp_path, value):
    write(tmp_path / "pyproject.toml", f"[tool.gradguard]\nper-file-ignores = {value}\n")
    write(tmp_path / "x.py", GG001)
    run = gradguard("check", ".", cwd=tmp_path)
    [line] = run.stderr.splitlines()
    assert run.returncode == 2 and "pyproject.toml" in line and "'per-file-ignores'" in line


# ------------------------------------------------------------------ file-level noqa
def test_file_level_noqa(tmp_path):
    both = GG001 + GG002.replace("import torch\n", "")
    write(tmp_path / "all.py", "# gradguard: noqa\n" + both)
    write(tmp_path / "some.py", both.replace("import torch\n", "import torch\n# gradguard: noqa: GG002\n", 1))
    write(tmp_path / "trailing.py", both.replace("import torch\n", "import torch  # gradguard: noqa\n", 1))
    write(tmp_path / "in_string.py", '"""\n# gradguard: noqa\n"""\n' + both)
    assert flagged(tmp_path, ".") == {"some.py": {"GG001"}, "trailing.py": {"GG001", "GG002"},
                                      "in_string.py": {"GG001", "GG002"}}


# ------------------------------------------------------------------ --add-noqa
def without_added(data: bytes) -> bytes:
    return data.replace(b"  # noqa: GG001", b"").replace(b"  # noqa: GG002", b"").replace(b", GG001", b"")


def test_add_noqa_then_nothing_is_found_and_only_comments_changed(tmp_path):
    files = {
        "plain.py": GG001.encode(),
        "crlf.py": GG002.replace("\n", "\r\n").encode(),
        "latin1.py": ("# -*- coding: latin-1 -*-\n# caf\u00e9\n" + GG002).encode("latin-1"),
        "merged.py": GG001.replace("loss.backward()  # raises", "loss.backward()  # noqa: E501").encode(),
        "in_a_string.py": GG001.replace("loss.backward()  # raises", 'loss.backward(); s = """\ntext\n"""').encode(),
    }
    for name, data in files.items():
        write(tmp_path / name, data)
    before = flagged(tmp_path, ".")
    assert set(before) == set(files)
    run = gradguard("check", "--add-noqa", ".", cwd=tmp_path)
    assert (run.returncode, run.stdout, run.stderr) == (0, "", "Added 5 noqa directives.\n")
    assert flagged(tmp_path, ".") == {}
    for name, data in files.items():
        assert without_added((tmp_path / name).read_bytes()) == data, name
    assert b"# raises  # noqa: GG001\n" in (tmp_path / "plain.py").read_bytes()  # after the comment already there
    assert (tmp_path / "crlf.py").read_bytes().count(b"\r\n") == GG002.count("\n")
    assert b"# noqa: E501, GG001\n" in (tmp_path / "merged.py").read_bytes()
    assert b'text\n"""  # noqa: GG001\n' in (tmp_path / "in_a_string.py").read_bytes()  # not inside the string
    again = gradguard("check", "--add-noqa", ".", cwd=tmp_path)
    assert again.stderr == "Added 0 noqa directives.\n"


def test_add_noqa_leaves_notebooks_and_stdin_alone(tmp_path):
    cell = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": 1, "source": GG001}
    notebook = json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
    write(tmp_path / "n.ipynb", notebook)
    run = gradguard("check", "--add-noqa", ".", cwd=tmp_path)
    assert run.returncode == 0 and "n.ipynb: --add-noqa does not edit notebooks" in run.stderr
    assert (tmp_path / "n.ipynb").read_text() == notebook
    assert gradguard("check", "--add-noqa", "-", cwd=tmp_path, stdin=GG001).returncode == 2
    assert gradguard("check", "--add-noqa", "--fix", ".", cwd=tmp_path).returncode == 2


# ------------------------------------------------------------------ GG100
STALE = """\
import torch
x = torch.randn(3, requires_grad=True)
y = (x ** 2).sum()
y.backward()  # noqa: GG001, E501
z = y * 2  # noqa: GG002 kept for the old loop
w = z + 1  # noqa
v = w + 1  # noqa: GG999
"""


def test_unused_noqa_is_reported_when_selected_and_fixed_safely(tmp_path):
    write(tmp_path / "stale.py", STALE)
    write(tmp_path / "used.py", GG001.replace("# raises", "# noqa: GG001"))
    write(tmp_path / "whole.py", "# gradguard: noqa: GG002\n" + GG001.replace("# raises", "# noqa: GG001"))
    assert flagged(tmp_path, ".") == {}  # off by default, even under select = ["ALL"]
    run = gradguard("check", "--select", "ALL,GG100", "--no-cache", ".", cwd=tmp_path)
    lines = [line for line in run.stdout.splitlines() if " GG100 " in line]
    assert lines == ["stale.py:4:15: GG100 [warning] unused `noqa` directive (unused: `GG001`)",
                     "stale.py:5:12: GG100 [warning] unused `noqa` directive (unused: `GG002`)",
                     "stale.py:7:12: GG100 [warning] unused `noqa` directive (unknown: `GG999`)",
                     "whole.py:1:1: GG100 [warning] unused `gradguard: noqa` directive (unused: `GG002`)"]
    fix = gradguard("check", "--select", "ALL,GG100", "--fix", ".", cwd=tmp_path)
    assert fix.returncode == 0 and "Fixed 4 problems." in fix.stdout
    assert (tmp_path / "stale.py").read_text() == STALE.replace("GG001, E501", "E501").replace(
        "# noqa: GG002 kept", "# kept").replace("  # noqa: GG999", "")
    assert (tmp_path / "whole.py").read_text() == GG001.replace("# raises", "# noqa: GG001")


# ------------------------------------------------------------------ progress
def test_no_progress_line_when_stderr_is_not_a_terminal(tmp_path):
    for i in range(3):
        write(tmp_path / f"f{i}.py", GG001)
    run = gradguard("check", "--no-cache", ".", cwd=tmp_path)
    assert "checked" not in run.stderr and "\r" not in run.stderr


def test_progress_line_on_a_terminal_is_rewritten_and_erased(tmp_path):
    """The count shows from the first file on (GRADGUARD_PROGRESS_DELAY=0), whatever the
    machine's speed; by default a run must first last half a second."""
    cases = sorted(CASES.glob("*.py"))[:8]
    for case in cases:
        write(tmp_path / case.name, case.read_text())
    primary, secondary = pty.openpty()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "server"), os.environ.get("PYTHONPATH", "")]),
           "GRADGUARD_PROGRESS_DELAY": "0"}
    with open(os.devnull, "w") as devnull:
        proc = subprocess.Popen([sys.executable, "-m", "gradguard", "check", "--no-cache", "-j", "1", "."],
                                cwd=tmp_path, stdout=devnull, stderr=secondary, env=env)
    os.close(secondary)
    output = b""
    while True:
        try:
            chunk = os.read(primary, 4096)
        except OSError:  # the other end closed
            break
        if not chunk:
            break
        output += chunk
    assert proc.wait(timeout=120) == 1
    os.close(primary)
    text = output.decode()
    assert f"\rchecked 1/{len(cases)} files" in text
    assert text.endswith("\r\x1b[K")  # erased: nothing of it stays on the terminal
