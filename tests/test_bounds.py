"""The time limit bounds every analysis, and code too deep to analyse is said so, with where.

Adversarial inputs (tests/adversarial.py, smaller than bench/bench_timeout.py runs them) go
through `api.check_source` with a small limit: each check ends within it, plus 10%, plus a
little slack; a huge literal finishes or stops within the default limit.  What is measured is
the processor time the check spent: another process's load cannot stretch it, and the deadline
is read from the wall clock, so on a loaded machine a check only stops sooner in that time.
"""
import time

import adversarial
import pytest
from gradguard import analysis, api
from gradguard.config import Config

LIMIT = 0.3
SLACK = 0.15  # seconds: the work between two reads of the clock, on a slow machine


def timed_check(text: str, timeout: float) -> tuple[float, api.Checked]:
    """(processor seconds spent, result) of a check of `text` with a budget of `timeout`."""
    start = time.process_time()
    result = api.check_source(text, "adversarial.py", Config(timeout=timeout, follow_imports=False))
    return time.process_time() - start, result


# sizes that parse in a fraction of the limit; the first four took 2 to 4 times the limit
# when the deadline was read only between statements, and joins were quadratic
@pytest.mark.parametrize("make, size", [
    (adversarial.list_literal, 5000), (adversarial.set_literal, 5000), (adversarial.dict_literal, 6000),
    (adversarial.comprehensions, 1000), (adversarial.many_branches, 2500), (adversarial.long_loop, 2500),
    (adversarial.long_function, 5000), (adversarial.nested_loops, 12), (adversarial.nested_blocks, 99),
])
def test_a_check_ends_within_its_time_limit(make, size):
    elapsed, result = timed_check(make(size), LIMIT)
    assert elapsed <= LIMIT * 1.1 + SLACK, f"{make.__name__}({size}): {elapsed:.2f} s"
    assert not result.internal, result.error


def test_a_timeout_says_which_statement_was_running():
    """The loop takes minutes; its 12 lines before take milliseconds, so the 2 s deadline falls
    in the loop (its `for` or its body) even on a loaded machine."""
    text = adversarial.long_loop(5000)  # `for` on line 13, its body of 5,000 statements to the end
    with pytest.raises(analysis.AnalysisTimeout) as stopped:
        analysis.run(text, deadline=time.monotonic() + 2)
    assert 13 <= stopped.value.line <= text.count("\n")


def test_a_literal_of_30000_tensors_ends_within_the_default_limit():
    timeout = Config().timeout
    elapsed, result = timed_check(adversarial.list_literal(30000), timeout)
    assert elapsed <= timeout * 1.1 + SLACK
    assert result.error is None or "time budget" in result.error


@pytest.mark.parametrize("terms, stage", [(5000, "parse"), (900, "analyse")])
def test_an_expression_too_deep_is_named_with_its_line(terms, stage):
    text = adversarial.long_expression(terms)  # the expression is on line 5
    with pytest.raises(analysis.TooComplex) as too_deep:
        analysis.run(text)
    assert str(too_deep.value) == f"expression nested too deeply to {stage}"
    assert too_deep.value.line == 5
    result = api.check_source(text, "deep.py", Config())
    assert not result.internal and "nested too deeply" in result.error


def test_nesting_python_allows_is_analysed():
    for text in (adversarial.nested_lists(100), adversarial.nested_calls(100), adversarial.long_expression(300)):
        analysis.run(text)
