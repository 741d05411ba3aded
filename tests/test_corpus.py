"""Acceptance: GradGuard against the execution-labelled corpus (../shared/corpus).

Every positive case must be flagged at the line that raised, by a rule predicting that
kind of error (at least 95% of them); no clean case may get any finding from a
predicting rule.  The labels come from running the scripts under torch, not from us.
"""
from __future__ import annotations

from corpus_support import CORPUS, manifest
from gradguard.analysis import analyze
from gradguard.rules import ALL_RULES

PREDICTS = {r.code: r.predicts for r in ALL_RULES}


def _predictions(case):
    source = (CORPUS / case["file"]).read_text(encoding="utf-8")
    return {(f.span.line, PREDICTS[f.code]) for f in analyze(source) if PREDICTS[f.code]}


def test_positive_cases_are_flagged_at_the_raising_line():
    cases = [c for c in manifest() if c["kind"] != "clean"]
    missed = [c["id"] for c in cases if (c["line"], c["kind"]) not in _predictions(c)]
    recall = 1 - len(missed) / len(cases)
    assert recall >= 0.95, f"recall {recall:.0%}, missed: {missed}"


def test_clean_cases_get_no_predicting_finding():
    noisy = {c["id"]: sorted(_predictions(c)) for c in manifest() if c["kind"] == "clean"}
    noisy = {k: v for k, v in noisy.items() if v}
    assert not noisy, f"false alarms on clean cases: {noisy}"
