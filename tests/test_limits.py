"""Limits degrade towards silence: less work allowed can remove a predicting finding, never make one.

Every limit of the engine (`gradguard.engine.limits.Limits`: statements, loop rounds, call
depth and call strings, workspace modules, the work after which imports are given up) and the
time budget turn facts into unknowns.  Over the corpus, the test programs, generated programs
and the multi-module projects, the predicting findings under small limits must be a subset of
those under the defaults; a project whose imports cost more than `import_work` allows is
analysed alone, with a subset of the findings its imports give.

The verdicts depend on no clock: the limits are counts, and a time budget short enough to stop
an analysis only removes its findings (the file is then reported as not analysed), so each
assertion holds however fast the machine is.
"""
from __future__ import annotations

import time
from pathlib import Path

import progen
import pytest
from corpus_support import CORPUS, manifest
from gradguard import analysis
from gradguard.analysis import AnalysisTimeout, Limits
from gradguard.rules import ALL_RULES
from gradguard.workspace import Workspace

HERE = Path(__file__).parent
PREDICTS = {r.code: r.predicts for r in ALL_RULES}
# Each cuts one kind of work far below what the test programs need.
SMALL = {
    "statements": Limits(statements=40, statements_per_line=0),
    "loop rounds": Limits(loop_rounds=2, concrete_iterations=1),
    "call depth": Limits(call_depth=1),
    "recursion": Limits(recursion=1),
    "call string": Limits(call_string=1),
    "no calls, one round": Limits(statements=0, statements_per_line=0, loop_rounds=1, concrete_iterations=1,
                                  call_depth=0),
}
# Each makes following imports stop early, or not start.
SMALL_IMPORTS = {
    "import work": Limits(import_work=50),
    "modules": Limits(modules=1),
    "import depth": Limits(import_depth=0),
    "foreign statements": Limits(foreign_statements=5),
}


def predicting(source: str, path: str = "<string>", **kwargs) -> set:
    """(line, column, code) of the predicting findings; none if the analysis ran out of time."""
    try:
        findings = analysis.analyze(source, path=path, **kwargs)
    except AnalysisTimeout:
        return set()
    return {(f.span.line, f.span.column, f.code) for f in findings if PREDICTS.get(f.code)}


def _sources() -> dict[str, str]:
    out = {f"corpus/{c['file']}": (CORPUS / c["file"]).read_text() for c in manifest()}
    out.update({f"programs/{p.name}": p.read_text() for p in sorted((HERE / "programs" / "cases").glob("*.py"))})
    out.update({f"generated/{p.name}": p.source for p in progen.generate(20261126, 60)})
    return out


SOURCES = _sources()


@pytest.fixture(scope="module")
def generous() -> dict[str, set]:
    return {name: predicting(source) for name, source in SOURCES.items()}


def test_the_sample_has_findings_to_lose(generous):
    """The property below says something: most sources have a finding under the defaults."""
    assert sum(bool(found) for found in generous.values()) >= len(SOURCES) // 3


@pytest.mark.parametrize("limit", sorted(SMALL))
def test_smaller_limits_only_remove_findings(generous, limit):
    gained = {}
    lost = 0
    for name, source in SOURCES.items():
        found = predicting(source, limits=SMALL[limit])
        if found - generous[name]:
            gained[name] = sorted(found - generous[name])
        lost += bool(generous[name] - found)
    assert not gained, f"findings made by cutting work ({limit}): {gained}"
    # a shorter call string merges the regions of calls from different places: no loss here
    assert lost or limit == "call string", f"the limit ({limit}) removed nothing: it tested nothing"


def test_a_time_budget_only_removes_findings(generous):
    """Budgets from nothing to plenty: an analysis stopped by its deadline reports nothing
    (its file is reported as not analysed); one that ends reports what it always does."""
    for budget in (0.0, 0.001, 0.01, 0.05):
        for name, source in list(SOURCES.items())[::7]:
            found = predicting(source, deadline=time.monotonic() + budget)
            assert found <= generous[name], (name, budget)


def test_the_clock_counts_work_not_time():
    """Two runs of one analysis count the same work, whatever else the machine does."""
    from gradguard.engine.interp import Interpreter

    source = SOURCES["programs/" + sorted(p.name for p in (HERE / "programs" / "cases").glob("*.py"))[0]]
    work = set()
    for _ in range(3):
        interpreter = Interpreter(source, analysis.parse(source))
        interpreter.run()
        work.add(interpreter.cx.clock.work)
    assert len(work) == 1 and work.pop() > 0


def test_a_work_budget_stops_where_the_count_says():
    """`Limits.work` stops an analysis after that many steps, on any machine: the same
    budget stops the same analysis every time, one step more than it needs lets it end."""
    from gradguard.engine.interp import Interpreter

    source = max(SOURCES.values(), key=len)
    interpreter = Interpreter(source, analysis.parse(source))
    interpreter.run()
    needed = interpreter.cx.clock.work
    for _ in range(2):
        with pytest.raises(AnalysisTimeout, match="work budget"):
            analysis.analyze(source, limits=Limits(work=needed // 2))
    assert predicting(source, limits=Limits(work=needed + 1)) == predicting(source)


PROJECTS = sorted((HERE / "projects" / "cases").glob("*/*/train.py"))


@pytest.mark.parametrize("limit", sorted(SMALL_IMPORTS))
def test_giving_up_imports_only_removes_findings(limit):
    """The fallbacks of import following: a file whose imports cost more work than allowed
    is analysed alone; fewer modules, a shallower import depth or fewer of their statements
    leave more of them opaque.  Each gives a subset of what following every import gives,
    and on these projects, whose errors pass through an imported module, loses some."""
    lost = 0
    for main in PROJECTS:
        source, path = main.read_text(), str(main)
        full = predicting(source, path, workspace=Workspace(main.parent))
        cut = predicting(source, path, workspace=Workspace(main.parent), limits=SMALL_IMPORTS[limit])
        assert cut <= full, (main, limit, cut - full)
        lost += bool(full - cut)
    assert lost, f"the limit ({limit}) removed nothing on the projects: it tested nothing"

