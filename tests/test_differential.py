"""Differential test: generated training programs, labelled by running them, against GradGuard.

`progen` composes a seeded sample of small training scripts from independent motifs (model
builders, in-place activations, optimizers, GAN/RNN/cache/accumulation patterns, module,
function or method), with correct and buggy variants about equally often.  The execution
oracle runs each under torch; GradGuard must then flag every raising program at the raising
line with a rule predicting that kind of error (recall at least 97%) and leave the clean
ones alone (at most 1% flagged); the fixes it offers must make the raising ones run.
Skipped without torch or the oracle (see `run_oracle`).
"""
from __future__ import annotations

from dataclasses import replace

import progen
import pytest
from gradguard.config import Config
from gradguard.verify import fix_all

SEED = 20240611
N = 150


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    """Every generated program, run and judged: (verdicts, programs that did not run)."""
    programs = progen.generate(SEED, N)
    results = progen.label(programs, tmp_path_factory.mktemp("differential"))
    broken = [f"{p.name}: {results[p.name]['kind']}: {results[p.name]['message']}"
              for p in programs if results[p.name]["kind"] in progen.BROKEN]
    judged = [progen.judge(p, results[p.name]) for p in programs if results[p.name]["kind"] not in progen.BROKEN]
    return judged, broken


def test_generated_programs_run(verdicts):
    _, broken = verdicts
    assert len(broken) <= 0.02 * N, "generator bugs (other_error/timeout):\n" + "\n".join(broken)


def test_errors_are_found_at_the_raising_line(verdicts):
    judged, _ = verdicts
    recall, _ = progen.rates(judged)
    missed = [v.describe() for v in judged if v.kind != "clean" and v.outcome != "found"]
    assert recall >= 0.97, f"recall {recall:.1%}, {len(missed)} not found:\n" + "\n".join(missed)


def test_clean_programs_are_not_flagged(verdicts):
    judged, _ = verdicts
    _, flagged_rate = progen.rates(judged)
    flagged = [v.describe() for v in judged if v.outcome == "flagged"]
    assert flagged_rate <= 0.01, f"{flagged_rate:.1%} of clean programs flagged:\n" + "\n".join(flagged)


def test_fixes_make_the_crashing_programs_run(verdicts, tmp_path):
    """Proof by running: every other generated program that crashed is fixed as
    `--fix --unsafe-fixes` fixes it (confirmed fixes only, one at a time) and run again under
    torch (`bench/bench_fixes.py` does the same for thousands)."""
    judged, _ = verdicts
    crashing = [v for v in judged if v.kind != "clean"][::2]
    fixed = [replace(v.program, source=fix_all(v.program.source, v.program.name, Config(), unsafe=True)[0])
             for v in crashing]
    after = progen.label(fixed, tmp_path)
    failed = [f"{v.program.name}: {v.kind} -> {after[v.program.name]['kind']} {after[v.program.name]['message'][:80]}"
              for v in crashing if after[v.program.name]["kind"] != "clean"]
    rate = 1 - len(failed) / len(crashing)
    assert rate >= 0.97, f"{rate:.1%} of {len(crashing)} run clean after the fixes:\n" + "\n".join(failed)
