"""`gradguard check` over every file of the standard library and of the installed torch package.

    python bench/bench_sweep.py [--share 1.0] [--seed 0]

What counts as a failure is `tests/sweep_support.py`'s (an internal error, a timeout, a
traceback, any line on stderr); the test suite sweeps a seeded tenth (tests/test_sweep.py).
Prints each tree's failures and the time taken; exits 1 if anything failed.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from sweep_support import ROOTS, files_of, sweep  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--share", type=float, default=1.0, help="share of each tree's files (default: all)")
    parser.add_argument("--seed", type=int, default=0, help="which files, with --share below 1")
    args = parser.parse_args()
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as work:
        problems = sweep(Path(work), args.share, args.seed)
    seconds = time.monotonic() - start
    for name, root in ROOTS.items():
        count = len(files_of(root, args.share, args.seed))
        print(f"{name}: {count:,} files, {len(problems[name])} failures")
        for line in problems[name][:20]:
            print(f"  {line}")
    print(f"{seconds:.0f} s on two processes")
    return 1 if any(problems.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
