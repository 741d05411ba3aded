"""Programs of every shape GradGuard claims to handle, each checked two ways.

`tests/programs/cases/*.py` start with `# expect: KIND` and mark the raising line with
`# raises`.  GradGuard must agree with that label, and (when torch is installed) the
execution oracle must too: running the script under torch raises that error at that
line, or runs clean.  So a wrong expectation fails here instead of teaching the
analysis a wrong lesson.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from corpus_support import assert_torch_agrees, expectation, run_oracle
from gradguard.analysis import analyze
from gradguard.rules import ALL_RULES

HERE = Path(__file__).parent / "programs"
PREDICTS = {r.code: r.predicts for r in ALL_RULES}
CASES = sorted(p.name for p in (HERE / "cases").glob("*.py"))


# Programs GradGuard is known to get wrong, and why: each is a gap to close, not a wrong label
# (the oracle test below still runs them); strict, so that closing one fails until it is removed here.
KNOWN_GAPS: dict = {}


def _cases(names: list, gaps: dict) -> list:
    """The programs as parameters, those with a known gap expected to fail (strictly)."""
    return [pytest.param(c, marks=pytest.mark.xfail(reason=gaps[c], strict=True)) if c in gaps else c for c in names]


def _labelled(name: str) -> tuple[str, int | None, set]:
    """A program's label (kind, raising line) and what GradGuard predicts for it."""
    kind, line = expectation(HERE / "cases" / name)
    found = {(f.span.line, PREDICTS[f.code]) for f in analyze((HERE / "cases" / name).read_text())
             if PREDICTS[f.code]}
    return kind, line, found


@pytest.mark.parametrize("name", _cases(CASES, KNOWN_GAPS))
def test_gradguard_agrees_with_the_label(name):
    kind, line, found = _labelled(name)
    if kind == "clean":
        assert not found
    else:
        assert (line, kind) in found, f"expected {kind} at line {line}, found {sorted(found)}"


# Crash programs where GradGuard also reports a line the raise keeps from running (a path goes on past
# a raise found by the backward and in-place rules); strict, like KNOWN_GAPS.
KNOWN_EXTRAS = {
    "grad_of_noise_keeps_encoder_graph_crash.py": "the loop's backward (line 36) is reported after the raise",
    "pinn_second_derivative_without_create_graph.py": "the backward (line 12) is reported after the raise",
}
CRASHES = [c for c in CASES if expectation(HERE / "cases" / c)[0] != "clean"]


@pytest.mark.parametrize("name", _cases(CRASHES, KNOWN_EXTRAS))
def test_nothing_reported_past_the_raise(name):
    """A program stops where it raises: no other line of it is reported as raising."""
    kind, line, found = _labelled(name)
    assert found <= {(line, kind)}


@pytest.fixture(scope="module")
def oracle_results():
    """Every program, run under torch."""
    return run_oracle(HERE, CASES)


@pytest.mark.parametrize("name", CASES)
def test_torch_agrees_with_the_label(name, oracle_results):
    assert_torch_agrees(oracle_results[name], *expectation(HERE / "cases" / name))
