"""How often GradGuard agrees with torch on generated training programs, and where it does not.

    python bench/bench_differential.py [--seed S] [-n N] [--keep DIR] [--list] [--show NAME ...]

Generates N programs with tests/progen.py (the generator the differential test samples),
runs every one under torch with the execution oracle (../shared/corpus/oracle.py) for its
label, and compares GradGuard's findings with it.  Prints the label counts, the recall (an
error is found when a rule predicting its kind reports the raising line), the fraction of
clean programs flagged, and the disagreements grouped by motif, the motifs most often
in disagreement first (rate: of the programs with that motif), each with its shortest
program as the example.  --keep writes the programs to DIR/cases instead of a
temporary directory; --list prints every disagreement; --show prints programs' sources.
It only reports: the thresholds are asserted by tests/test_differential.py.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "server"), str(ROOT / "tests")]  # bench this checkout, with the tests' generator

import progen  # noqa: E402
import pytest  # noqa: E402  (run_oracle reports a missing torch or oracle with pytest.skip)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("-n", type=int, default=2000, help="how many programs (default: 2000)")
    parser.add_argument("--keep", type=Path, metavar="DIR", help="write the programs to DIR/cases and keep them")
    parser.add_argument("--list", action="store_true", help="print every disagreement")
    parser.add_argument("--show", action="append", default=[], metavar="NAME", help="print a program's source")
    args = parser.parse_args()

    programs = progen.generate(args.seed, args.n)
    by_name = {p.name: p for p in programs}
    unknown = [name for name in args.show if name not in by_name]
    if unknown:
        parser.error(f"no program {', '.join(unknown)} among the first {args.n} of seed {args.seed}")
    with tempfile.TemporaryDirectory(prefix="gg_differential_") as tmp:
        start = time.perf_counter()
        try:
            results = progen.label(programs, args.keep or Path(tmp))
        except pytest.skip.Exception as e:
            parser.error(str(e))
        oracle_seconds = time.perf_counter() - start
    broken = [p for p in programs if results[p.name]["kind"] in progen.BROKEN]
    start = time.perf_counter()
    verdicts = [progen.judge(p, results[p.name]) for p in programs if results[p.name]["kind"] not in progen.BROKEN]
    check_seconds = time.perf_counter() - start

    labels = Counter(v.kind for v in verdicts)
    outcomes = Counter(v.outcome for v in verdicts)
    errors = len(verdicts) - labels["clean"]
    recall, flagged = progen.rates(verdicts)
    print(f"programs:      {len(programs)} (seed {args.seed}), {len(broken)} dropped as generator bugs")
    for p in broken:
        print(f"  {p.name}: {results[p.name]['kind']}: {results[p.name]['message']}")
    print("labels:        " + ", ".join(f"{kind} {count}" for kind, count in sorted(labels.items())))
    print(f"recall:        {recall:6.1%} ({outcomes['found']}/{errors} found at the raising line; "
          f"{outcomes['wrong_line']} wrong line, {outcomes['wrong_kind']} wrong kind, {outcomes['missed']} missed)")
    print(f"clean flagged: {flagged:6.1%} ({outcomes['flagged']}/{labels['clean']})")
    print(f"time:          oracle {oracle_seconds:.1f} s, gradguard {check_seconds:.1f} s")

    disagreements = [v for v in verdicts if v.outcome not in progen.AGREE]
    seen = Counter(m for v in verdicts for m in v.program.motifs)
    groups = defaultdict(list)
    for v in disagreements:
        for motif in v.program.motifs:
            groups[motif].append(v)
    if groups:
        print("\ndisagreements by motif (missed: an error not found there; false alarm: a clean run flagged):")
        print(f"  {'motif':48} {'missed':>6} {'false alarm':>11} {'of':>5} {'rate':>5}  example")
    for motif, group in sorted(groups.items(), key=lambda item: (-len(item[1]) / seen[item[0]], item[0])):
        missed = sum(v.kind != "clean" for v in group)
        example = min(group, key=lambda v: len(v.program.source)).program.name
        rate = len(group) / seen[motif]
        print(f"  {motif:48} {missed:6} {len(group) - missed:11} {seen[motif]:5} {rate:5.0%}  {example}")
    if args.list:
        print()
        for v in disagreements:
            print(v.describe())
    for name in args.show:
        result = results[name]
        ran = "clean" if result["kind"] == "clean" else f"{result['kind']}@{result['line']}: {result['message']}"
        print(f"\n# {name}: ran {ran}")
        print(by_name[name].source, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
