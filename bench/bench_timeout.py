"""Whether `gradguard check --timeout T` holds its time limit on adversarial inputs.

    python bench/bench_timeout.py [--timeouts 1 2] [--scale 1] [--only WORD ...]

Each input of tests/adversarial.py (huge literals of tensors, a 5,000-term and other deeply
nested expressions, nested blocks and loops, a long loop body, a 20,000-line function, a call
graph, comprehension chains, a big class body, thousands of branches) is written to a
temporary directory and checked by `gradguard check --timeout T --no-cache` in a process of
its own.  Its wall time less the start-up of the command (the same check of an empty file,
timed in this run) must be within T + 10%, whatever the input: the analysis stops on time, or
finishes, or reports the file too deeply nested.  Prints one line per input and limit, with
what the command said (its GG000 message, if any); exits 1 if one run does not hold.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the generators the tests use too

import adversarial  # noqa: E402

MARGIN = 0.10  # a run may exceed its limit by this share of it
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "server")}  # bench this checkout


def check(path: Path, timeout: float) -> tuple[float, str]:
    """Wall seconds of `gradguard check` on `path`, and what it said: its GG000 message (the
    file not analysed, and why), else its last line of output."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "gradguard", "check", "--no-cache", "--timeout", str(timeout),
                           str(path)], env=ENV, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    lines = (done.stdout + done.stderr).strip().splitlines() or [""]
    said = next((line.split(" GG000 ", 1)[1] for line in lines if " GG000 " in line), lines[-1])
    return wall, f"exit {done.returncode}: {said}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeouts", type=float, nargs="+", default=[1.0, 2.0], metavar="T",
                        help="time limits to check each input with, in seconds (default: 1 2)")
    parser.add_argument("--scale", type=float, default=1.0, help="size of the inputs relative to the full one")
    parser.add_argument("--only", nargs="+", default=[], metavar="WORD", help="only the inputs whose name has WORD")
    args = parser.parse_args()
    failures = 0
    with tempfile.TemporaryDirectory(prefix="gg_bench_timeout_") as tmp:
        empty = Path(tmp, "empty.py")
        empty.write_text("")
        files = []
        for name, (size, text) in adversarial.sources(args.scale).items():
            if not args.only or any(word in name for word in args.only):
                files.append((name, size, Path(tmp, f"{len(files):02d}.py")))
                files[-1][2].write_text(text)
        for timeout in args.timeouts:
            startup = min(check(empty, timeout)[0] for _ in range(3))
            limit = timeout * (1 + MARGIN)
            print(f"--timeout {timeout:g}: start-up {startup:.2f} s, limit {limit:.2f} s for the rest")
            for name, size, path in files:
                wall, outcome = check(path, timeout)
                holds = wall - startup <= limit
                failures += not holds
                print(f"  {name + f' ({size:,})':42s} {wall:6.2f} s {wall - startup:6.2f} s  "
                      f"{'holds' if holds else 'OVER '}  {outcome[:90]}")
    print(f"{failures} run(s) over the limit" if failures else "every run held its limit")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
