"""Every rule's documented examples are tests (Fixit's model): valid snippets give no
finding of that rule, invalid ones give one on the line marked `# error`; and every
rule's documentation has ruff's sections."""
from __future__ import annotations

import pytest
from gradguard.analysis import analyze
from gradguard.rules import ALL_RULES, PREDICTS
from gradguard.rules.base import SECTIONS

VALID = [(r, i, src) for r in ALL_RULES for i, src in enumerate(r.VALID)]
INVALID = [(r, i, src) for r in ALL_RULES for i, src in enumerate(r.INVALID)]


@pytest.mark.parametrize("rule,index,source", VALID, ids=[f"{r.code}-valid{i}" for r, i, _ in VALID])
def test_valid_example(rule, index, source):
    assert [f for f in analyze(source) if f.code == rule.code] == []


@pytest.mark.parametrize("rule,index,source", INVALID, ids=[f"{r.code}-invalid{i}" for r, i, _ in INVALID])
def test_invalid_example(rule, index, source):
    marked = [n for n, line in enumerate(source.splitlines(), 1) if line.rstrip().endswith("# error")]
    assert len(marked) == 1, "an invalid example marks exactly one line with `# error`"
    lines = [f.span.line for f in analyze(source) if f.code == rule.code]
    assert lines == marked


@pytest.mark.parametrize("rule", ALL_RULES, ids=[r.code for r in ALL_RULES])
def test_rule_identity_and_docs(rule):
    assert rule.code.startswith("GG") and rule.name and rule.summary
    assert rule.predicts in PREDICTS + (None,)
    assert rule.severity in ("error", "warning", "info")
    doc = rule.doc()
    for section in SECTIONS:
        assert section in doc, f"{rule.code} docs lack {section!r}"
    assert rule.VALID and rule.INVALID


def test_codes_are_unique():
    codes = [r.code for r in ALL_RULES]
    assert len(codes) == len(set(codes))
