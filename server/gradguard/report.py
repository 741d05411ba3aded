"""`gradguard check`'s reports for machines: JSON, JSON lines, SARIF, GitHub Actions
annotations and JUnit XML, the formats ruff writes, so that CI shows findings where it
shows everything else (code scanning, pull-request annotations, test reports).

Every format is rendered from the same records (`record`, the JSON form of a finding), so
a location or a fix reads the same in all of them; a file that could not be analysed is a
record too, of the pseudo-code GG000 (`api.failure`), so no format can leave it out.

A record's `fix` is the one `gradguard check --fix` would make (with `--unsafe-fixes` for an
unsafe one): the finding's first fix the engine confirms (`verify`), as the text edits
libcst builds for it (`edits`).  That costs an analysis per candidate, so only the formats
that carry fixes ask for it (`WITH_FIXES`); a notebook's findings have none, as `--fix`
does not edit notebooks.
"""
from __future__ import annotations

import json
import re
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from gradguard import __version__

if TYPE_CHECKING:  # the engine loads when a check runs, not for `gradguard --version` (the parser reads FORMATS)
    from gradguard.api import Checked
    from gradguard.config import Config
    from gradguard.findings import Finding

HOMEPAGE = "https://github.com/gradguard/gradguard"
FORMATS = ("text", "json", "json-lines", "sarif", "github", "junit")
LEGACY_JSON = "json-list"  # `--format json`: the bare list of records that scripts read before `--output-format`
WITH_FIXES = frozenset({"json", "json-lines", "sarif", LEGACY_JSON})
JSON_VERSION = 2  # of the `--output-format json` object (the bare list was the first shape)
SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
SARIF_LEVEL = {"error": "error", "warning": "warning", "info": "note", "hint": "note"}
GITHUB_LEVEL = {"error": "error", "warning": "warning", "info": "notice", "hint": "notice"}
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")  # characters XML 1.0 cannot hold


@dataclass
class Report:
    """What a run found: the paths checked, the records of their findings (GG000 for a file
    not analysed), and the files that could not be checked (`{"path", "message"}`, the
    message `path:line:column: cause`).  Without `keep` (the text output, which prints each
    file's findings as they come) only the counts are kept, so that a run's memory does not
    grow with its files."""

    keep: bool = True
    files: list[str] = field(default_factory=list)
    findings: list[dict] = field(default_factory=list)
    errors: list[dict] = field(default_factory=list)
    internal: bool = False  # an error was a bug in GradGuard
    checked: int = 0  # files
    failed: int = 0  # files not analysed
    severities: Counter = field(default_factory=Counter)  # of the findings, GG000 aside

    def add(self, result: Checked, fixes: list[dict | None] | None = None) -> None:
        from gradguard.api import failure

        self.checked += 1
        self.failed += result.error is not None
        self.internal = self.internal or result.internal
        self.severities.update(finding.severity for finding in result.findings)
        if not self.keep:
            return
        self.files.append(result.path)
        gg000 = failure(result)
        if gg000 is not None:
            self.findings.append(record(result, gg000))
            self.errors.append({"path": result.path, "message": result.error})
        self.findings += [record(result, finding, fix)
                          for finding, fix in zip(result.findings, fixes or [None] * len(result.findings))]


def record(result: Checked, finding: Finding, fix: dict | None = None) -> dict:
    """The JSON form of a finding: 1-based lines and columns, `cell` set in notebooks only,
    the rule's documentation `url`, and `fix` (see `preferred_fixes`)."""
    from gradguard.api import display_path
    from gradguard.rules import rule_by_code

    span = finding.span
    cell, line = result.locate(span.line)
    related = [{"path": display_path(rel.span.path), "cell": None, "line": rel.span.line,
                "column": rel.span.column + 1, "message": rel.message} if rel.span.path is not None else
               {"path": result.path, "cell": rel_cell, "line": rel_line, "column": rel.span.column + 1,
                "message": rel.message}
               for rel in finding.related for rel_cell, rel_line in [result.locate(rel.span.line)]]
    rule = rule_by_code(finding.code)
    return {"path": result.path, "cell": cell, "line": line, "column": span.column + 1,
            "end_line": result.locate(span.end_line)[1], "end_column": span.end_column + 1,
            "code": finding.code, "name": finding.name, "severity": finding.severity,
            "message": finding.message, "related": related, "url": rule.url() if rule else None, "fix": fix}


def preferred_fixes(result: Checked, config: Config, data: bytes | None = None) -> list[dict | None]:
    """For each finding of `result`, the fix `--fix` would make, as text edits of the checked
    text (`data`, else the file read again): `{"title", "applicability", "edits": [{"line",
    "column", "end_line", "end_column", "content"}]}`, 1-based, the end exclusive; None
    where no fix is confirmed."""
    none: list[dict | None] = [None] * len(result.findings)
    if result.path.endswith(".ipynb") or not any(finding.fixes for finding in result.findings):
        return none
    from gradguard import edits, verify  # libcst loads only for the formats that carry fixes
    from gradguard.analysis import AnalysisTimeout, analyze
    from gradguard.api import NotReadable, read_source, workspace_for
    from gradguard.encoding import decode

    try:
        source = decode(read_source(result.path) if data is None else data)
        workspace = workspace_for(config)
        # unfiltered by the settings: what a fix must not add (as `verify.fix_all` does)
        everything = analyze(source, path=result.path, workspace=workspace, deadline=time.monotonic() + config.timeout)
    except (NotReadable, SyntaxError, UnicodeDecodeError, LookupError, AnalysisTimeout):
        return none  # changed or slower since it was checked: no fix rather than a misplaced one
    out = []
    for finding in result.findings:
        # the candidates one at a time, up to the first confirmed: `verified` of them all costs an analysis each
        fix = next((fix for candidate in finding.fixes
                    for fix in verify.verified(source, replace(finding, fixes=(candidate,)), everything,
                                               path=result.path, workspace=workspace)), None)
        reps = edits.replacements(source, fix) if fix is not None else []
        out.append({"title": fix.title, "applicability": fix.applicability,
                    "edits": [{"line": r.span.line, "column": r.span.column + 1, "end_line": r.span.end_line,
                               "end_column": r.span.end_column + 1, "content": r.text} for r in reps]}
                   if reps else None)
    return out


def render(fmt: str, report: Report) -> str:
    """The whole report in `fmt` (any of `FORMATS` but text, or `LEGACY_JSON`)."""
    return _WRITERS[fmt](report)


def statistics(report: Report, as_json: bool = False) -> str:
    """Findings counted by rule, most frequent first, as ruff's `--statistics`: `3  GG001  freed-graph-backward`."""
    counts = Counter((r["code"], r["name"]) for r in report.findings)
    rows = sorted(counts.items(), key=lambda item: (-item[1], item[0][0]))
    if as_json:
        return json.dumps([{"code": code, "name": name, "count": n} for (code, name), n in rows], indent=2) + "\n"
    width = len(str(rows[0][1])) if rows else 0
    return "".join(f"{n:>{width}}  {code}  {name}\n" for (code, name), n in rows)


def _json(report: Report) -> str:
    return json.dumps({"version": JSON_VERSION, "tool": {"name": "gradguard", "version": __version__},
                       "findings": report.findings, "errors": report.errors}, indent=2) + "\n"


def _json_list(report: Report) -> str:
    return json.dumps(report.findings, indent=2) + "\n"


def _json_lines(report: Report) -> str:
    return "".join(json.dumps(r) + "\n" for r in report.findings)


# ----------------------------------------------------------------- SARIF 2.1.0
def _sarif(report: Report) -> str:
    from gradguard.rules import ALL_RULES

    rules = [_sarif_rule(rule) for rule in ALL_RULES] + [_sarif_not_analysed()]
    index = {rule["id"]: i for i, rule in enumerate(rules)}
    notifications = [{"level": "error", "message": {"text": e["message"]},
                      "locations": [{"physicalLocation": {"artifactLocation": _artifact(e["path"])}}]}
                     for e in report.errors]
    run = {
        "tool": {"driver": {"name": "gradguard", "version": __version__, "semanticVersion": __version__,
                            "informationUri": HOMEPAGE, "rules": rules}},
        "invocations": [{"executionSuccessful": not report.internal, "toolExecutionNotifications": notifications}],
        "originalUriBaseIds": {"%SRCROOT%": {"uri": Path.cwd().as_uri().rstrip("/") + "/"}},
        "columnKind": "unicodeCodePoints",  # columns count characters, as everywhere in GradGuard
        "results": [_sarif_result(r, index) for r in report.findings],
    }
    return json.dumps({"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}, indent=2) + "\n"


def _sarif_rule(rule) -> dict:
    doc = rule.doc()
    return {"id": rule.code, "name": rule.name, "shortDescription": {"text": rule.summary},
            "fullDescription": {"text": rule.section("What it does") or rule.summary},
            "help": {"text": doc, "markdown": doc}, "helpUri": rule.url(),
            "defaultConfiguration": {"level": SARIF_LEVEL[rule.severity]}}


def _sarif_not_analysed() -> dict:
    """The descriptor of GG000 (`api.failure`), which no rule module has."""
    from gradguard.api import NOT_ANALYSED

    return {"id": NOT_ANALYSED, "name": "not-analysed",
            "shortDescription": {"text": "A file GradGuard could not analyse"},
            "fullDescription": {"text": "The file could not be read, decoded or parsed, or its analysis ran out of "
                                        "time or hit a bug in GradGuard: its bugs, if any, are not reported. "
                                        "The message says why."},
            "help": {"text": "Fix what the message names (a syntax error, an encoding), or raise the "
                             "'timeout' setting."},
            "helpUri": f"{HOMEPAGE}#files-not-analysed-gg000", "defaultConfiguration": {"level": "error"}}


def _sarif_result(r: dict, index: dict) -> dict:
    out = {"ruleId": r["code"], "ruleIndex": index.get(r["code"], -1), "level": SARIF_LEVEL.get(r["severity"], "note"),
           "message": {"text": r["message"]},
           "locations": [_location(r["path"], r["cell"], {"startLine": r["line"], "startColumn": r["column"],
                                                          "endLine": r["end_line"], "endColumn": r["end_column"]})],
           "relatedLocations": [{"id": i, **_location(rel["path"], rel["cell"], {"startLine": rel["line"],
                                                                                 "startColumn": rel["column"]}),
                                 "message": {"text": rel["message"]}} for i, rel in enumerate(r["related"])]}
    if r["fix"]:
        replacements = [{"deletedRegion": {"startLine": e["line"], "startColumn": e["column"], "endLine": e["end_line"],
                                           "endColumn": e["end_column"]}, "insertedContent": {"text": e["content"]}}
                        for e in r["fix"]["edits"]]
        out["fixes"] = [{"description": {"text": r["fix"]["title"]},
                         "artifactChanges": [{"artifactLocation": _artifact(r["path"]), "replacements": replacements}]}]
    return out


def _location(path: str, cell: int | None, region: dict) -> dict:
    """A SARIF location; in a notebook the lines count from the cell, which `properties.cell` names."""
    out: dict = {"physicalLocation": {"artifactLocation": _artifact(path), "region": region}}
    if cell is not None:
        out["properties"] = {"cell": cell}
    return out


def _artifact(path: str) -> dict:
    """A path as a URI: relative to the working directory (`%SRCROOT%`) when below it, else absolute."""
    from gradguard.api import display_path

    shown = display_path(path)
    if Path(shown).is_absolute():
        return {"uri": Path(shown).as_uri()}
    return {"uri": quote(Path(shown).as_posix()), "uriBaseId": "%SRCROOT%"}


# ----------------------------------------------------------------- GitHub Actions workflow commands
def _github(report: Report) -> str:
    """`::error file=...,line=...::message`, one per finding, as GitHub annotates a pull
    request; a notebook's cell goes in the message (a line number would point into its JSON)."""
    from gradguard.api import display_path

    lines = []
    for r in report.findings:
        props: dict = {"file": display_path(r["path"])}
        message = r["message"]
        if r["cell"] is None:
            props.update(line=r["line"], col=r["column"], endLine=r["end_line"], endColumn=r["end_column"])
        else:
            message = f"cell {r['cell']}:{r['line']}:{r['column']}: {message}"
        props["title"] = f"{r['code']} {r['name']}"
        message += "".join(f"\n  {_where(rel)}: {rel['message']}" for rel in r["related"])
        lines.append(_command(GITHUB_LEVEL.get(r["severity"], "notice"), props, message))
    return "".join(line + "\n" for line in lines)


def _command(level: str, props: dict, message: str) -> str:
    """One workflow command, escaped as the runner unescapes it (`%`, CR and LF everywhere;
    `:` and `,` too in a property)."""
    def data(text) -> str:
        return str(text).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    fields = ",".join(f"{key}={data(value).replace(':', '%3A').replace(',', '%2C')}" for key, value in props.items())
    return f"::{level} {fields}::{data(message)}"


def _where(r: dict) -> str:
    """`path:line:column`, or `path:cell N:line:column` in a notebook, as the text output shows it."""
    cell = f"cell {r['cell']}:" if r["cell"] is not None else ""
    return f"{r['path']}:{cell}{r['line']}:{r['column']}"


# ----------------------------------------------------------------- JUnit XML
def _junit(report: Report) -> str:
    """A test suite per file checked, a failing test case per finding (a passing one for a
    clean file), as ruff writes it; a file that could not be analysed has an erroring one (GG000)."""
    import xml.etree.ElementTree as ET

    from gradguard.api import NOT_ANALYSED

    by_path: dict[str, list[dict]] = {path: [] for path in report.files}
    for r in report.findings:
        by_path.setdefault(r["path"], []).append(r)
    errors = sum(r["code"] == NOT_ANALYSED for r in report.findings)
    root = ET.Element("testsuites", name="gradguard", tests="0", failures=str(len(report.findings) - errors),
                      errors=str(errors))
    for path, records in by_path.items():
        failed = sum(r["code"] == NOT_ANALYSED for r in records)
        suite = ET.SubElement(root, "testsuite", name=path, tests=str(len(records) or 1),
                              failures=str(len(records) - failed), errors=str(failed))
        for r in records:
            case = ET.SubElement(suite, "testcase", name=f"{r['code']} {r['name']}", classname=path, file=path,
                                 line=str(r["line"]), column=str(r["column"]))
            outcome = ET.SubElement(case, "error" if r["code"] == NOT_ANALYSED else "failure",
                                    message=_xml(r["message"]), type=r["code"])
            outcome.text = _xml(f"{_where(r)}: {r['code']} [{r['severity']}] {r['message']}" +
                                "".join(f"\n    {_where(rel)}: {rel['message']}" for rel in r["related"]))
        if not records:
            ET.SubElement(suite, "testcase", name="gradguard", classname=path, file=path)
    root.set("tests", str(sum(len(suite) for suite in root)))
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _xml(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)


_WRITERS = {"json": _json, LEGACY_JSON: _json_list, "json-lines": _json_lines, "sarif": _sarif,
            "github": _github, "junit": _junit}
