"""`gradguard explain` on the real traceback of every crashing case of the corpus.

    python bench/bench_explain.py

Each case is run under torch as the execution oracle runs it, and its traceback explained:
the explanation must name the line that raised and at least one cause site, on at least 90%
of the cases (tests/test_explain.py checks a seeded sample the same way).  Prints the rate
and each case that failed; exits 1 below 90%.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_explain import crashing, explained  # noqa: E402


def main() -> int:
    with tempfile.TemporaryDirectory() as work:
        results = explained(crashing(), Path(work))
    failed = {case: why for case, why in results.items() if why}
    rate = 1 - len(failed) / len(results)
    print(f"gradguard explain: {len(results) - len(failed)}/{len(results)} real tracebacks explained ({rate:.0%})")
    for case, why in sorted(failed.items()):
        print(f"  {case}: {why}")
    return 0 if rate >= 0.9 else 1


if __name__ == "__main__":
    sys.exit(main())
