"""The command-line contract, run as a user runs it: `python -m gradguard` in a subprocess.

Exit codes, output formats, per-file errors next to good files, noqa, pyproject settings,
notebooks and source encodings.  The inputs are real bugs the engine must find.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from gradguard import api, cli
from gradguard.analysis import AnalysisTimeout

REPO = Path(__file__).resolve().parents[1]

DOUBLE_BACKWARD = """\
import torch
x = torch.randn(3, requires_grad=True)
y = (x ** 2).sum()
y.backward()
y.backward()
"""
CLEAN = """\
import torch
x = torch.randn(3, requires_grad=True)
y = (x ** 2).sum()
y.backward()
"""
FINDING_KEYS = {"path", "cell", "line", "column", "end_line", "end_column", "code", "name", "severity",
                "message", "related", "url", "fix"}


def gradguard(*args, cwd: Path, stdin: str = "") -> subprocess.CompletedProcess:
    """Run the command of this checkout, whether or not it is installed."""
    path = [str(REPO / "server"), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return subprocess.run([sys.executable, "-m", "gradguard", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": os.pathsep.join(path)},
                          input=stdin)


def write(path: Path, content) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def gg001_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if " GG001 " in line]


def test_text_output_exit_1_and_related_locations(tmp_path):
    write(tmp_path / "bad.py", DOUBLE_BACKWARD)
    run = gradguard("check", "bad.py", cwd=tmp_path)
    assert run.returncode == 1, run.stderr
    [line] = gg001_lines(run.stdout)
    assert line.startswith("bad.py:5:") and " GG001 [error] " in line
    related = [line for line in run.stdout.splitlines() if line.startswith("    ")]
    assert any(line.startswith("    bad.py:4:") for line in related)  # the first backward freed the graph
    assert run.stdout.splitlines()[-1].startswith("Found ")
    assert run.stderr == ""


def test_clean_file_exit_0(tmp_path):
    write(tmp_path / "good.py", CLEAN)
    run = gradguard("check", ".", cwd=tmp_path)
    assert (run.returncode, run.stdout, run.stderr) == (0, "No problems found in 1 file.\n", "")


def test_json_schema_is_one_based(tmp_path):
    write(tmp_path / "bad.py", "import torch\nif True:\n    x = torch.randn(3, requires_grad=True)\n"
                               "    y = (x ** 2).sum()\n    y.backward()\n    y.backward()\n")
    run = gradguard("check", "--format", "json", "bad.py", cwd=tmp_path)
    assert run.returncode == 1
    records = json.loads(run.stdout)
    [record] = [r for r in records if r["code"] == "GG001"]
    assert set(record) == FINDING_KEYS
    assert (record["path"], record["cell"], record["line"], record["severity"]) == ("bad.py", None, 6, "error")
    assert 5 <= record["column"] < record["end_column"] and record["end_line"] == 6  # indented by 4: column >= 5
    assert isinstance(record["name"], str) and record["message"]
    assert record["related"] and all(set(r) == {"path", "cell", "line", "column", "message"} for r in record["related"])
    assert 5 in [r["line"] for r in record["related"]]


def test_clean_json_is_an_empty_list(tmp_path):
    write(tmp_path / "good.py", CLEAN)
    run = gradguard("check", "--format", "json", "good.py", cwd=tmp_path)
    assert (run.returncode, json.loads(run.stdout)) == (0, [])


def test_syntax_error_is_one_line_and_other_files_are_checked(tmp_path):
    write(tmp_path / "a_broken.py", "import torch\ndef f(:\n    pass\n")
    write(tmp_path / "b_bad.py", DOUBLE_BACKWARD)
    run = gradguard("check", ".", cwd=tmp_path)
    assert run.returncode == 1 and run.stderr == ""
    [error] = [line for line in run.stdout.splitlines() if " GG000 " in line]
    assert error.startswith("a_broken.py:2:7: GG000 [error] syntax error: ")
    assert gg001_lines(run.stdout)
    assert "1 file could not be checked (GG000)" in run.stdout


def test_syntax_error_alone_exits_1(tmp_path):
    write(tmp_path / "broken.py", "x = (\n")
    write(tmp_path / "good.py", CLEAN)
    run = gradguard("check", "broken.py", "good.py", cwd=tmp_path)
    error, summary = run.stdout.splitlines()
    assert run.returncode == 1 and summary.startswith("No problems found in 2 files.")
    assert error.startswith("broken.py:1:5: GG000 [error] syntax error: ") and run.stderr == ""


def test_noqa(tmp_path):
    second_backward = DOUBLE_BACKWARD.rstrip("\n")  # its last line is the finding's
    write(tmp_path / "coded.py", second_backward + "  # noqa: GG001\n")
    write(tmp_path / "bare.py", second_backward + "  # NOQA\n")
    write(tmp_path / "other.py", second_backward + "  # noqa: GG101, E501\n")
    write(tmp_path / "in_string.py", second_backward + '; print("# noqa")\n')
    run = gradguard("check", "--format", "json", ".", cwd=tmp_path)
    assert {r["path"] for r in json.loads(run.stdout) if r["code"] == "GG001"} == {"other.py", "in_string.py"}


def test_pyproject_select_ignore_severity(tmp_path):
    write(tmp_path / "src" / "bad.py", DOUBLE_BACKWARD)
    pyproject = tmp_path / "pyproject.toml"

    write(pyproject, '[tool.gradguard]\nseverity = { GG001 = "warning" }\n')
    run = gradguard("check", "src", cwd=tmp_path)
    [line] = gg001_lines(run.stdout)
    assert "GG001 [warning]" in line and run.returncode == 0  # below the default --fail-level (error)

    write(pyproject, '[tool.gradguard]\nignore = ["GG001"]\n')
    assert not gg001_lines(gradguard("check", "src", cwd=tmp_path).stdout)
    assert gg001_lines(gradguard("check", "src", "--select", "GG001", cwd=tmp_path).stdout)  # --select wins

    write(pyproject, '[tool.gradguard]\nselect = ["GG1"]\n')
    assert not gg001_lines(gradguard("check", "src/bad.py", cwd=tmp_path).stdout)
    assert not gg001_lines(gradguard("check", "src", "--select", "GG0", "--ignore", "GG001", cwd=tmp_path).stdout)

    write(pyproject, '[tool.gradguard]\nexclude = ["src"]\n')
    assert gradguard("check", ".", cwd=tmp_path).stdout == "No problems found in 0 files.\n"
    assert gg001_lines(gradguard("check", "src/bad.py", cwd=tmp_path).stdout)  # named files are always checked


def test_config_option_and_disabled(tmp_path):
    write(tmp_path / "bad.py", DOUBLE_BACKWARD)
    write(tmp_path / "off.toml", "[tool.gradguard]\nenabled = false\n")
    run = gradguard("check", "bad.py", "--config", "off.toml", cwd=tmp_path)
    assert (run.returncode, run.stdout) == (0, "") and "disabled" in run.stderr


@pytest.mark.parametrize("args, pyproject, fragment", [
    (["check", "x.py"], '[tool.gradguard]\nselet = ["GG001"]\n', "unknown key 'selet'"),
    (["check", "x.py"], "[tool.gradguard\n", "invalid TOML"),
    (["check", "x.py", "--select", "GG9"], "", "names no rule"),
    (["check", "x.py", "--timeout", "0"], "", "'timeout'"),
    (["check", "missing.py"], "", "no such file or directory: missing.py"),
    (["check", "--output-format", "xml"], "", "invalid choice"),
    (["check", "x.py", "--format", "xml"], "", "invalid choice"),
    (["lint", "x.py"], "", "invalid choice"),
    ([], "", "a command is required"),
    (["rule", "GG999"], "", "unknown rule code 'GG999'"),
])
def test_usage_and_config_errors_exit_2_with_one_line(tmp_path, args, pyproject, fragment):
    write(tmp_path / "x.py", CLEAN)
    write(tmp_path / "pyproject.toml", pyproject)
    run = gradguard(*args, cwd=tmp_path)
    assert run.returncode == 2 and run.stdout == ""
    [line] = run.stderr.splitlines()
    assert fragment in line


def test_notebook_findings_name_cell_and_line(tmp_path):
    cells = [
        {"cell_type": "markdown", "metadata": {}, "source": ["# Training\n"]},
        {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": 1,
         "source": ["import torch\n", "%matplotlib inline\n", "x = torch.randn(3, requires_grad=True)\n",
                    "y = (x ** 2).sum()"]},
        {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": 2, "source": "y.backward()\n"},
        {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": 3,
         "source": ["!pip list\n", "y.backward()\n"]},
    ]
    notebook = {"cells": cells, "metadata": {"kernelspec": {"language": "python", "name": "python3"}},
                "nbformat": 4, "nbformat_minor": 5}
    write(tmp_path / "train.ipynb", json.dumps(notebook))
    run = gradguard("check", ".", cwd=tmp_path)
    [line] = gg001_lines(run.stdout)
    assert line.startswith("train.ipynb:cell 4:2:")
    assert any(":cell 3:1:" in related for related in run.stdout.splitlines() if related.startswith("    "))
    [record] = [r for r in json.loads(gradguard("check", "--format", "json", "train.ipynb", cwd=tmp_path).stdout)
                if r["code"] == "GG001"]
    assert (record["path"], record["cell"], record["line"], record["end_line"]) == ("train.ipynb", 4, 2, 2)
    assert {"cell": 3, "line": 1}.items() <= record["related"][0].items()


def test_percent_operator_continuing_a_line_is_python_not_a_magic(tmp_path):
    """`print("%.4f"` then `    %(loss))` on the next line: that `%` is an operator inside the
    brackets; taking it for a magic made the whole notebook a syntax error, findings lost."""
    cells = [
        {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": 1,
         "source": ["import torch\n", "x = torch.randn(3, requires_grad=True)\n", "y = (x ** 2).sum()\n",
                    "y.backward()\n", "y.backward()\n"]},
        {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": 2,
         "source": ["print('Cost: %.4f'\n", "      %(y.item()))\n", 's = """\n', '%not a magic"""\n',
                    "%timeit y.item()\n"]},
    ]
    notebook = {"cells": cells, "metadata": {"kernelspec": {"language": "python", "name": "python3"}},
                "nbformat": 4, "nbformat_minor": 5}
    write(tmp_path / "train.ipynb", json.dumps(notebook))
    run = gradguard("check", "train.ipynb", cwd=tmp_path)
    assert run.stderr == ""
    [line] = gg001_lines(run.stdout)
    assert line.startswith("train.ipynb:cell 1:5:")


def test_broken_notebook_is_one_line_and_other_languages_are_passed_over(tmp_path):
    write(tmp_path / "broken.ipynb", "{not json")
    write(tmp_path / "r.ipynb", json.dumps({"cells": [{"cell_type": "code", "source": "x <- c(1, 2)"}],
                                           "metadata": {"kernelspec": {"language": "R"}}}))
    write(tmp_path / "bad.py", DOUBLE_BACKWARD)
    run = gradguard("check", ".", cwd=tmp_path)
    assert run.returncode == 1 and gg001_lines(run.stdout) and run.stderr == ""
    [error] = [line for line in run.stdout.splitlines() if " GG000 " in line]
    assert error.startswith("broken.ipynb:1:1: GG000 [error] not a Jupyter notebook: ")


def test_encodings(tmp_path):
    latin = "# -*- coding: latin-1 -*-\nname = 'caf\u00e9'\n" + DOUBLE_BACKWARD
    write(tmp_path / "latin.py", latin.encode("latin-1"))
    write(tmp_path / "bom.py", b"\xef\xbb\xbf" + DOUBLE_BACKWARD.encode())
    write(tmp_path / "undecodable.py", b"x = '\xff\xfe'\n" + DOUBLE_BACKWARD.encode())
    run = gradguard("check", "--format", "json", ".", cwd=tmp_path)
    assert run.returncode == 1
    records = json.loads(run.stdout)
    found = {(r["path"], r["line"], r["column"]) for r in records if r["code"] == "GG001"}
    assert {(path, line) for path, line, _ in found} == {("latin.py", 7), ("bom.py", 5)}
    assert len({column for _, _, column in found}) == 1  # the BOM is not a column
    [error] = [r for r in records if r["code"] == "GG000"]
    assert error["path"] == "undecodable.py" and error["message"].startswith("cannot decode: ")


def test_rules_and_rule(tmp_path):
    run = gradguard("rules", "--format", "json", cwd=tmp_path)
    rules = json.loads(run.stdout)
    assert run.returncode == 0 and rules and all(set(r) == {"code", "name", "predicts", "severity", "summary"}
                                                 for r in rules)
    codes = [r["code"] for r in rules]
    assert codes == sorted(codes) and {"GG001", "GG002", "GG003", "GG004"} <= set(codes)
    assert {r["predicts"] for r in rules} - {None} == {"freed_graph", "inplace_version", "leaf_inplace", "no_grad_fn",
                                                       "numpy_requires_grad", "nonleaf_optimizer",
                                                       "requires_grad_nonleaf", "inference_tensor",
                                                       "grad_unused", "nonscalar_backward"}
    text = gradguard("rules", cwd=tmp_path).stdout.splitlines()
    assert len(text) == len(rules) and text[0].startswith("GG001 ")
    doc = gradguard("rule", "gg001", cwd=tmp_path)
    assert doc.returncode == 0 and doc.stdout.startswith("# GG001 ")


def test_version(tmp_path):
    run = gradguard("--version", cwd=tmp_path)
    assert run.returncode == 0 and run.stdout.startswith("gradguard 0.")


@pytest.mark.parametrize("failure, code, fragment", [
    (RuntimeError("broken\ninvariant"), 2,
     ("a.py:1:1: GG000 [error] internal error in GradGuard: RuntimeError: broken invariant (please report; at "
      "test_cli.py:")),
    (AnalysisTimeout(line=1), 1, "a.py:1:1: GG000 [error] not analysed past line 1: time budget of 0.5s spent"),
])
def test_engine_failures_are_one_line_and_other_files_go_on(tmp_path, monkeypatch, capsys, failure, code, fragment):
    """In-process, with the engine replaced: no real input is known to crash it.  An internal
    error is said on stderr too, since it fails the run (exit 2)."""
    real = api.run

    def run(source, **kwargs):
        if "explode" in source:
            raise failure
        return real(source, **kwargs)

    monkeypatch.setattr(api, "run", run)
    write(tmp_path / "a.py", "explode = 1\n")
    write(tmp_path / "b.py", DOUBLE_BACKWARD)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["check", "--timeout", "0.5", "--no-cache", "."]) == code
    out, err = capsys.readouterr()
    [line] = [line for line in out.splitlines() if " GG000 " in line]
    assert line.startswith(fragment) and gg001_lines(out)
    assert err.splitlines() == ([line.replace(" GG000 [error]", "")] if code == 2 else [])


def test_shipped_example_is_found():
    """The README's set-up command checks `examples/`: the RNN hidden-state bug must show."""
    lines = (REPO / "examples" / "rnn_hidden_state.py").read_text().splitlines()
    backward = 1 + next(i for i, line in enumerate(lines) if line.strip().startswith("loss.backward()"))
    run = gradguard("check", "examples/", cwd=REPO)
    assert run.returncode == 1, run.stderr
    [line] = gg001_lines(run.stdout)
    assert line.startswith(f"{Path('examples', 'rnn_hidden_state.py')}:{backward}:")


@pytest.mark.slow
def test_shipped_example_really_fails_at_run_time():
    """What the example's docstring and the README promise, checked by running it (imports torch)."""
    run = subprocess.run([sys.executable, str(REPO / "examples" / "rnn_hidden_state.py")], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 1 and run.stdout.startswith("step 0: ")
    assert "RuntimeError: Trying to backward through the graph a second time" in run.stderr
