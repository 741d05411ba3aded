"""Never hang, never go silent: every file `gradguard check` cannot analyse is a GG000 finding
with its cause, in text and JSON; what a walk cannot read is skipped with a note on stderr,
never waited on; a broken configuration stops the run with one line (exit 2).

Run as a user runs it (`python -m gradguard` in a subprocess, see test_cli), each with a
timeout: a FIFO read would block forever, /dev/zero never ends.
"""
import json
import os
import re
import sys

import pytest
from gradguard import api
from gradguard.config import Config
from test_cli import DOUBLE_BACKWARD, gradguard, write

needs_posix = pytest.mark.skipif(sys.platform == "win32", reason="FIFOs, devices and symlinks as on POSIX")


def gg000(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if " GG000 " in line]


def as_json(tmp_path, *args) -> tuple[int, list[dict], str]:
    run = gradguard("check", "--format", "json", *args, cwd=tmp_path)
    return run.returncode, json.loads(run.stdout), run.stderr


def test_syntax_error(tmp_path):
    write(tmp_path / "broken.py", "import torch\n\ndef f(:\n")
    write(tmp_path / "bad.py", DOUBLE_BACKWARD)
    run = gradguard("check", ".", cwd=tmp_path)
    assert (run.returncode, run.stderr) == (1, "")
    assert gg000(run.stdout) == ["broken.py:3:7: GG000 [error] syntax error: invalid syntax"]
    assert run.stdout.splitlines()[-1] == "Found 1 problem (1 error) in 2 files. 1 file could not be checked (GG000)."
    code, records, err = as_json(tmp_path, ".")
    [record] = [r for r in records if r["code"] == "GG000"]
    assert (code, err) == (1, "") and {r["code"] for r in records} == {"GG000", "GG001"}
    assert record == {"path": "broken.py", "cell": None, "line": 3, "column": 7, "end_line": 3, "end_column": 7,
                      "code": "GG000", "name": "not-analysed", "severity": "error",
                      "message": "syntax error: invalid syntax", "related": [], "url": None, "fix": None}


@pytest.mark.parametrize("bad, said", [("\0", "a null byte"), ("\ud800", "a lone surrogate (U+D800)")])
def test_characters_no_parser_takes(bad, said):
    """An editor's text can hold what no file can: a lone surrogate comes through its JSON
    (found by tests/test_fuzz.py's mutations, where it was an internal error)."""
    result = api.check_source(f"import torch\n\nx = '{bad}'\n", "t.py", Config())
    assert (result.cause, result.at, result.internal) == (f"syntax error: source contains {said}", (3, 0), False)


def test_time_budget_names_the_line_reached(tmp_path):
    """A long chain of tensor operations: more than 0.2 s of analysis on any machine."""
    lines = ["import torch", "x = torch.randn(3, requires_grad=True)", "h = x"]
    lines += [f"h = (h * {i} + x).relu()" for i in range(4000)] + ["h.sum().backward()"]
    write(tmp_path / "long.py", "\n".join(lines) + "\n")
    run = gradguard("check", "--no-cache", "--timeout", "0.2", "long.py", cwd=tmp_path)
    [line] = gg000(run.stdout)
    # the line reached (line 1, unnamed, only if the budget ran out before the first statement)
    stop = re.fullmatch(r"long\.py:(\d+):1: GG000 \[error\] not analysed(?: past line \1)?: "
                        r"time budget of 0\.2s spent \(setting 'timeout'\)", line)
    assert (run.returncode, run.stderr) == (1, "") and stop and int(stop[1]) < len(lines)
    code, [record], _ = as_json(tmp_path, "--no-cache", "--timeout", "0.2", "long.py")
    assert code == 1 and record["code"] == "GG000" and record["message"].startswith("not analysed past line ")


def test_undecodable_bytes(tmp_path):
    write(tmp_path / "latin.py", b"x = '\xff\xfe'\n" + DOUBLE_BACKWARD.encode())
    run = gradguard("check", "latin.py", cwd=tmp_path)
    assert (run.returncode, run.stderr) == (1, "")
    [line] = gg000(run.stdout)
    assert line == "latin.py:1:1: GG000 [error] cannot decode: invalid or missing encoding declaration"
    code, [record], _ = as_json(tmp_path, "latin.py")
    assert code == 1 and record["message"].startswith("cannot decode: ")


def test_file_too_large(tmp_path):
    with open(tmp_path / "huge.py", "wb") as stream:  # sparse: nothing is written
        stream.truncate(api.MAX_BYTES + 2**20)
    run = gradguard("check", ".", cwd=tmp_path)
    assert (run.returncode, run.stderr) == (1, "")
    assert gg000(run.stdout) == ["huge.py:1:1: GG000 [error] file too large to analyse (11.0 MB; the limit is 10 MB)"]


@needs_posix
def test_fifo_is_skipped_never_read(tmp_path):
    write(tmp_path / "bad.py", DOUBLE_BACKWARD)
    os.mkfifo(tmp_path / "x.py")
    run = gradguard("check", ".", cwd=tmp_path)  # no writer: reading x.py would block forever
    assert run.returncode == 1 and run.stderr == "gradguard: skipped x.py: not a regular file\n"
    assert run.stdout.splitlines()[-1] == "Found 1 problem (1 error) in 1 file."
    named = gradguard("check", "x.py", cwd=tmp_path)
    assert (named.returncode, named.stdout) == (0, "No problems found in 0 files.\n")
    assert named.stderr == "gradguard: skipped x.py: not a regular file\n"
    code, records, err = as_json(tmp_path, "x.py", "bad.py")
    assert (code, err) == (1, "gradguard: skipped x.py: not a regular file\n") and records[0]["code"] == "GG001"
    with pytest.raises(api.NotReadable, match="^not a regular file$"):
        api.read_source(tmp_path / "x.py")


@needs_posix
def test_symlinks_to_devices_and_out_of_the_tree(tmp_path):
    project = tmp_path / "project"
    write(project / "bad.py", DOUBLE_BACKWARD)
    write(tmp_path / "outside.py", DOUBLE_BACKWARD)
    os.symlink("/dev/zero", project / "zero.py")  # endless bytes
    os.symlink(tmp_path / "outside.py", project / "elsewhere.py")
    os.mkfifo(project / "pipe")
    os.symlink("pipe", project / "piped.py")
    os.symlink("bad.py", project / "alias.py")  # inside the tree: checked
    run = gradguard("check", ".", cwd=project)
    assert run.returncode == 1 and run.stderr.splitlines() == [
        "gradguard: skipped elsewhere.py: a symbolic link out of the tree walked",
        "gradguard: skipped piped.py: not a regular file",
        "gradguard: skipped zero.py: a symbolic link out of the tree walked"]
    assert [line.split(":")[0] for line in run.stdout.splitlines() if " GG001 " in line] == ["alias.py", "bad.py"]
    named = gradguard("check", "zero.py", "elsewhere.py", cwd=project)  # named: the link is the user's choice
    assert named.stderr == "gradguard: skipped zero.py: not a regular file\n" and named.returncode == 1
    assert named.stdout.startswith("elsewhere.py:5:1: GG001 ")
    with pytest.raises(api.NotReadable, match="^not a regular file$"):
        api.read_source(project / "zero.py")


def test_directory_removed_during_the_walk_is_reported(tmp_path):
    """The one real unreadable directory a test running as root can make: scandir of `b`
    fails with FileNotFoundError, from the walk itself, after the walk listed it."""
    for path in ("a/x.py", "b/y.py", "c/z.py"):
        write(tmp_path / path, "x = 1\n")
    notes: list[str] = []
    walk = api.iter_python_files([tmp_path], Config(), notes.append)
    assert next(walk) == tmp_path / "a" / "x.py"
    (tmp_path / "b" / "y.py").unlink()
    (tmp_path / "b").rmdir()
    assert list(walk) == [tmp_path / "c" / "z.py"]
    assert notes == [f"skipped {tmp_path / 'b'}: cannot read the directory: No such file or directory"]


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0,
                    reason="root reads a directory whatever its mode")
def test_unreadable_directory_is_reported(tmp_path):
    write(tmp_path / "bad.py", DOUBLE_BACKWARD)
    write(tmp_path / "locked" / "y.py", DOUBLE_BACKWARD)
    (tmp_path / "locked").chmod(0)
    try:
        run = gradguard("check", ".", cwd=tmp_path)
    finally:
        (tmp_path / "locked").chmod(0o755)
    assert run.returncode == 1 and run.stderr == "gradguard: skipped locked: cannot read the directory: " \
                                                 "Permission denied\n"


@pytest.mark.parametrize("pyproject, message", [
    ("tool = 1\n", "pyproject.toml: 'tool' must be a table, not 1"),
    ("[tool]\ngradguard = 3\n", "pyproject.toml: [tool.gradguard] must be a table, not 3"),
    ("[tool.gradguard\n", "pyproject.toml: invalid TOML: "),
    ("[tool.gradguard]\nselect = []\n",
     "pyproject.toml: [tool.gradguard]: 'select' is empty: no rule would run; remove it or list codes"),
])
def test_broken_configuration_is_one_line_and_exit_2(tmp_path, pyproject, message):
    write(tmp_path / "pyproject.toml", pyproject)
    write(tmp_path / "bad.py", DOUBLE_BACKWARD)
    for args in ([], ["--format", "json"]):
        run = gradguard("check", *args, cwd=tmp_path)
        [line] = run.stderr.splitlines()
        assert (run.returncode, run.stdout) == (2, "")
        assert line.startswith(f"gradguard: error: {tmp_path / message}")


def test_empty_select_on_the_command_line(tmp_path):
    write(tmp_path / "bad.py", DOUBLE_BACKWARD)
    run = gradguard("check", "--select", ",", "bad.py", cwd=tmp_path)
    assert (run.returncode, run.stdout) == (2, "")
    assert run.stderr == "gradguard: error: command line: 'select' is empty: no rule would run; " \
                         "remove it or list codes\n"


@needs_posix  # Windows forbids these characters in file names
def test_a_file_name_cannot_forge_lines(tmp_path):
    name = "x.py:1:1: GG001 [error] forged\n\x1b[2Kevil.py"
    write(tmp_path / name, DOUBLE_BACKWARD)
    write(tmp_path / "broken\n.py", "def f(:\n")
    run = gradguard("check", ".", cwd=tmp_path)
    lines = run.stdout.splitlines()
    assert run.returncode == 1 and len(lines) == 5  # the finding, its 2 related lines, a GG000, the summary
    assert lines[0] == "broken\\n.py:1:7: GG000 [error] syntax error: invalid syntax"
    escaped = "x.py:1:1: GG001 [error] forged\\n\\x1b[2Kevil.py"
    assert lines[1].startswith(f"{escaped}:5:1: GG001 [error] ") and lines[2].startswith(f"    {escaped}:4:1: ")
    code, records, _ = as_json(tmp_path, ".")
    assert code == 1 and {r["path"] for r in records} == {name, "broken\n.py"}  # JSON escapes them itself
