"""The analysis library's entry point: source text in, findings out.

Parses with `ast` (ten times faster than libcst on this machine; libcst is used only to
build fix edits), runs the flow engine to record facts, and lets every rule report.
No editor types and no torch import anywhere below this module.
"""
from __future__ import annotations

import ast
import warnings

from gradguard.engine import binder
from gradguard.engine.interp import AnalysisTimeout, ImportsTooSlow, Interpreter
from gradguard.facts import Facts
from gradguard.findings import Finding
from gradguard.notebook import Cells
from gradguard.rules import ALL_RULES
from gradguard.rules.base import FindingsRule

__all__ = ["AnalysisTimeout", "analyze", "parse", "run"]


def parse(source: str, path: str = "<string>") -> ast.Module:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # invalid escape sequences etc. are not ours to report
        return ast.parse(source, filename=path)


def analyze(source: str, *, path: str = "<string>", deadline: float | None = None, workspace=None) -> list[Finding]:
    """All rules' findings for one module, sorted by position.

    Raises SyntaxError if the text does not parse and AnalysisTimeout past `deadline`
    (a `time.monotonic()` value).  With a `workspace.Workspace`, imports of the project's
    own modules are followed into them."""
    return run(source, path=path, deadline=deadline, workspace=workspace)[0]


def run(source: str, *, path: str = "<string>", deadline: float | None = None,
        workspace=None, cells: Cells = ()) -> tuple[list[Finding], Facts | None]:
    """Findings and the facts behind them (the language server's hover reads the facts);
    facts are None for a file with nothing to analyse.  A finding is reported in the file
    analysed; one whose line is in an imported module is that module's to report.  `cells`:
    where a notebook's cells start in `source`, for the lines messages name."""
    tree = parse(source, path)
    if not binder.worth_analysing(source):
        return _with_findings_rules(source, []), None
    if binder.BACKWARD.search(source) is None:
        # The errors predicted here surface at a backward of this file; a file without one (a
        # library module) gains little from its imports, which would cost as much as itself.
        workspace = None
    try:
        try:
            facts = Interpreter(source, tree, deadline, path=path, workspace=workspace).run()
        except ImportsTooSlow:  # precision traded for time, as the engine does within a file
            facts = Interpreter(source, tree, deadline, path=path).run()
    except RecursionError:
        raise AnalysisTimeout("nesting too deep to analyse") from None
    facts.cells = cells
    findings: dict = {}
    for rule_cls in ALL_RULES:
        if not issubclass(rule_cls, FindingsRule):
            for f in rule_cls().check(facts):
                if f.span.path is None:
                    findings.setdefault((f.span, f.code), f)
    return _with_findings_rules(source, list(findings.values())), facts


def _with_findings_rules(source: str, findings: list[Finding]) -> list[Finding]:
    """`findings` and those of the rules about them (GG100: unused noqa), sorted by position."""
    findings += [f for rule_cls in ALL_RULES if issubclass(rule_cls, FindingsRule)
                 for f in rule_cls().check_findings(source, findings)]
    return sorted(findings, key=lambda f: (f.span.line, f.span.column, f.code))
