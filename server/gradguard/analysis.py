"""The analysis library's entry point: source text in, findings out.

Parses with `ast` (ten times faster than libcst on this machine; libcst is used only to
build fix edits), runs the flow engine to record facts, and lets every rule report.
No editor types and no torch import anywhere below this module.
"""
from __future__ import annotations

import ast
import gc
import io
import os
import time
import tokenize
import warnings
from collections import Counter
from contextlib import contextmanager

from gradguard.engine import binder
from gradguard.engine.imports import ImportsTooSlow
from gradguard.engine.interp import Interpreter
from gradguard.engine.limits import AnalysisTimeout, Limits, TooComplex
from gradguard.facts import Facts
from gradguard.findings import Finding
from gradguard.notebook import Cells
from gradguard.reparse import Reparser
from gradguard.rules import ALL_RULES
from gradguard.rules.base import FindingsRule
from gradguard.workspace import reexports, top_imports

__all__ = ["AnalysisTimeout", "Limits", "TooComplex", "analyze", "parse", "run"]


def parse(source: str, path: str = "<string>", deadline: float | None = None) -> ast.Module:
    """The module's tree.  Raises SyntaxError, or TooComplex for an expression nested deeper
    than CPython's parser goes (`a+a+...+a` with thousands of terms)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # invalid escape sequences etc. are not ours to report
        try:
            return ast.parse(source, filename=path)
        except (RecursionError, MemoryError):  # MemoryError: the parser's own stack overflowed
            raise TooComplex("expression nested too deeply to parse", _busiest_line(source, deadline)) from None


def _busiest_line(source: str, deadline: float | None) -> int | None:
    """The first line of the logical line with the most tokens: where a nesting too deep for
    the parser is (it does not say); None if the tokens cannot all be read by `deadline`."""
    tokens: Counter = Counter()  # first line of a logical line -> its tokens
    start = None
    try:
        for i, tok in enumerate(tokenize.generate_tokens(io.StringIO(source).readline)):
            if tok.type in _LAYOUT:
                start = None if tok.type == tokenize.NEWLINE else start
                continue
            start = start or tok.start[0]
            tokens[start] += 1
            if deadline is not None and not i & 1023 and time.monotonic() > deadline:
                return None
    except (tokenize.TokenError, SyntaxError):  # what was read still counts
        pass
    return max(tokens, key=tokens.__getitem__) if tokens else None


_LAYOUT = frozenset({tokenize.NEWLINE, tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT,
                     tokenize.ENDMARKER})


def analyze(source: str, *, path: str = "<string>", deadline: float | None = None, workspace=None,
            limits: Limits = Limits()) -> list[Finding]:
    """All rules' findings for one module, sorted by position.

    Raises SyntaxError if the text does not parse, TooComplex if it is nested too deeply
    to parse or analyse, and AnalysisTimeout near `deadline` (a `time.monotonic()` value: the
    analysis stops early enough to have ended by then, within a few milliseconds).  With a
    `workspace.Workspace`, imports of the project's own modules are followed into them.
    `limits`: the work allowed before precision is traded for time (smaller ones can only
    remove predicting findings)."""
    return run(source, path=path, deadline=deadline, workspace=workspace, limits=limits)[0]


def run(source: str, *, path: str = "<string>", deadline: float | None = None,
        workspace=None, cells: Cells = (), limits: Limits = Limits(),
        reparser: Reparser | None = None) -> tuple[list[Finding], Facts | None]:
    """Findings and the facts behind them (the language server's hover reads the facts);
    facts are None for a file with nothing to analyse.  A finding is reported in the file
    analysed; one whose line is in an imported module is that module's to report.  `cells`:
    where a notebook's cells start in `source`, for the lines messages name.  `reparser`: the
    document's last tree, to parse again only the statements an edit changed."""
    if deadline is not None:  # the engine stops early enough for the rest to end by `deadline`
        deadline -= WIND_DOWN * max(0.0, deadline - time.monotonic())
    with _collector_paused():
        tree = parse(source, path, deadline) if reparser is None else \
            reparser.parse(source, path, lambda text: parse(text, path, deadline))
        return _run(source, tree, path, deadline, workspace, cells, limits)


# Share of the time allowed kept for after the engine stops: freeing the values it built
# takes up to a tenth of the time building them did (their sets of graph regions).
WIND_DOWN = 0.1


@contextmanager
def _collector_paused():
    """Python's collection of reference cycles off for the analysis: the engine makes almost
    none, and one full collection over the tree and the values of a large file pauses it for
    a tenth of a second or more (half of its time, on a literal of 30,000 tensors), past its
    deadline.  After it, what it allocated joins the oldest generation unscanned (freeze,
    unfreeze): reference counting frees it, and a first collection over all of it would pause
    as long.  Left off if another thread had switched it off."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.freeze()
            gc.unfreeze()
            gc.enable()


def _run(source: str, tree: ast.Module, path: str, deadline: float | None, workspace, cells: Cells, limits: Limits):
    # A script without a backward of its own can still run one in the modules it imports: one
    # that calls an imported training step raises where it calls it.  Whether one has a
    # backward is read from their texts: a result depends on them (`Facts.read`, for the cache).
    # (Library modules, which only define things, are left alone: probing every import of
    # every module of a library for its file doubled the time of checking it.)
    script = workspace is not None and "torch" in source and os.path.isfile(path) \
        and binder.BACKWARD.search(source) is None and binder.runs_code(tree)
    sinks = _imported_sinks(tree, path, workspace) if script else {}
    imported_sink = any(sinks.values())
    if not binder.worth_analysing(source) and not imported_sink:
        return _with_findings_rules(source, []), (Facts(source, tree, read=tuple(sinks)) if sinks else None)
    if binder.BACKWARD.search(source) is None and not imported_sink:
        # The errors predicted here surface at a backward of this file; a file without one (a
        # library module) gains little from its imports, which would cost as much as itself.
        workspace = None
    try:
        try:
            facts = Interpreter(source, tree, deadline, path=path, workspace=workspace, limits=limits).run()
        except ImportsTooSlow:  # precision traded for work, as the engine does within a file
            facts = Interpreter(source, tree, deadline, path=path, limits=limits).run()
    except RecursionError:  # past the engine's own catching: where is not known
        raise TooComplex("code nested too deeply to analyse") from None
    facts.cells, facts.read = cells, tuple(sinks)
    findings: dict = {}
    for rule_cls in ALL_RULES:
        if not issubclass(rule_cls, FindingsRule):
            for f in rule_cls().check(facts):
                if deadline is not None and time.monotonic() > deadline:  # a finding's fixes took long
                    raise AnalysisTimeout()
                if f.span.path is None:
                    findings.setdefault((f.span, f.code), f)
    return _with_findings_rules(source, list(findings.values())), facts


def _imported_sinks(tree: ast.Module, path: str, workspace) -> dict:
    """The workspace modules this file imports names from at its top level, by path: whether
    a function or class it imports by name runs a backward (`from steps import train_step`),
    read from the module's text without analysing it, through the modules that re-export it
    (`from .policy import SACPolicy` in a package's `__init__`).  (Not any sink of the module:
    nearly every module of a library has an in-place op, or a backward somewhere, and following
    them all from every file tripled the time of a library's check.)"""
    out: dict = {}
    for module, level, names in top_imports(tree):
        for name in names:
            _runs_backward(workspace, path, module, level, name, out)
    return out


def _runs_backward(workspace, importer: str, module: str, level: int, name: str, out: dict, depth: int = 0) -> bool:
    """Whether `name` of the module an import names runs a backward, defined there or re-exported
    by a package from one of its modules (at most `REEXPORTS` deep), read from the texts without
    parsing them (a library's package `__init__` runs to thousands of lines); each module read
    goes into `out`."""
    found = workspace.located(importer, module, level)
    if found is None:
        return False
    text = workspace.text(importer, module, level) or ""
    runs = binder.runs_backward(text, name)
    if not runs and depth < REEXPORTS and found.name == "__init__.py":  # a package passing on its modules' names
        named, starred = reexports(text)
        runs = any(_runs_backward(workspace, str(found), source, len(dots), original, out, depth + 1)
                   for dots, source, original in [*named.get(name, ()), *((d, m, name) for d, m in starred)])
    out[str(found)] = out.get(str(found)) or runs
    return runs


REEXPORTS = 3  # packages re-exporting from packages: `pkg/__init__` -> `pkg/models/__init__` -> `pkg/models/net`


def _with_findings_rules(source: str, findings: list[Finding]) -> list[Finding]:
    """`findings` and those of the rules about them (GG100: unused noqa), sorted by position."""
    findings += [f for rule_cls in ALL_RULES if issubclass(rule_cls, FindingsRule)
                 for f in rule_cls().check_findings(source, findings)]
    return sorted(findings, key=lambda f: (f.span.line, f.span.column, f.code))
