"""Acceptance: `gradguard check` gets through the standard library and the torch package.

A seeded tenth of the files of each tree (`tests/sweep_support.py` says what counts as a
failure: an internal error, a timeout, a traceback, any line on stderr); the whole of both
trees is `bench/bench_sweep.py`'s.  Marked `slow`: the README's test command and CI run it.
"""
import pytest
from sweep_support import ROOTS, files_of, sweep

SHARE, SEED = 0.1, 19


@pytest.mark.slow
def test_check_survives_a_sample_of_stdlib_and_torch(tmp_path):
    problems = sweep(tmp_path, SHARE, SEED)
    for name, found in problems.items():
        assert not found, f"{name}: {len(found)} unexpected reports, first: {found[:10]}"


def test_the_sample_is_seeded_and_covers_both_trees():
    for root in ROOTS.values():
        sample = files_of(root, SHARE, SEED)
        assert sample == files_of(root, SHARE, SEED) and len(sample) >= 100
