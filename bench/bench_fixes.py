"""Whether GradGuard's preferred quick fix makes a crashing program run clean, and how it fails when not.

    python bench/bench_fixes.py [--seed S] [-n N] [--corpus] [--dir DIR] [--list] [--show NAME ...]

Finding an error is half the job: the fix the editor offers first (`Fix.preferred`) must
make the error go away without bringing another.  tests/test_edits.py asserts that on the
corpus positives; this bench measures it on the many more shapes tests/progen.py generates
(with --corpus on the corpus too, with --dir on any directory of scripts, labelled by running them).  Every program is run under torch by the execution
oracle; for each that raises, the finding on the raising line whose rule predicts that kind
gives its preferred fix (as the editor offers it: confirmed by `verify`), gradguard.edits
applies it, the findings it uncovers are fixed as `--fix --unsafe-fixes` would (torch stops
at the first error, so a program may hold two), and the fixed program is run by the oracle
and analysed again.  Each crashing program gets one outcome:

  no_finding     GradGuard does not find the error (bench_differential.py's business)
  no_fix         the finding offers no preferred fix
  edit_failed    the fix gives no replacement, or a file that does not parse
  runs_clean     the fixed program runs clean and GradGuard predicts no error in it
  still_flagged  the fixed program runs clean but GradGuard still predicts an error in it
  raises_same    the fixed program raises the same kind of error
  raises_other   it raises another kind of error (which, where, and whether GradGuard sees it)

Prints the counts, the rate "preferred fix runs clean / crashing programs with a finding"
per source and per motif (corpus cases count as motif corpus:KIND), and the failures
grouped by outcome, fix title and error, each with its shortest program as the example.
--list prints every failure; --show prints a program, its fix and the fix's diff.
It only reports: tests/test_edits.py asserts the corpus threshold.
"""
from __future__ import annotations

import argparse
import ast
import difflib
import re
import sys
import tempfile
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "server"), str(ROOT / "tests")]  # bench this checkout, with the tests' generator

import progen
import pytest  # run_oracle reports a missing torch or oracle with pytest.skip
from corpus_support import CORPUS, manifest, run_oracle
from gradguard.analysis import analyze
from gradguard.edits import apply, replacements
from gradguard.config import Config
from gradguard.verify import fix_all, verified

FAILURES = {"no_fix": "no fix", "edit_failed": "edit", "still_flagged": "flagged", "raises_same": "same",
            "raises_other": "other"}  # outcome: its column in the motif table
RAN_CLEAN = ("runs_clean", "still_flagged")


@dataclass
class Attempt:
    program: progen.Program
    ran: dict  # the oracle's label of the program: kind, line, message
    title: str = ""  # the preferred fix's title
    fixed: str = ""  # the program with the fix applied
    outcome: str = ""  # set by prepare, or by finish once the fixed program has run
    detail: str = ""  # what went wrong, the same for every program of a failure group
    where: str = ""  # where, in this program

    def describe(self):
        return f"{self.program.name}: {self.outcome}: {self.title or '-'}: {self.detail} {self.where}".rstrip()


def predicted(source: str) -> list[tuple[int, str, str]]:
    """(line, kind, code) of GradGuard's findings that predict an error."""
    return [(f.span.line, progen.PREDICTS[f.code], f.code) for f in analyze(source) if progen.PREDICTS[f.code]]


def gist(result: dict) -> str:
    """What a run raised, in words the same for every program it hits the same way: the kind,
    for inplace_version also which saved tensor, for other errors the message."""
    if result["kind"] == "inplace_version":
        saved = re.search(r"output \d+ of \w+", result["message"])
        return f"inplace_version ({saved.group(0) if saved else 'a leaf'})"
    return result["message"] if result["kind"] == "other_error" else result["kind"]


def prepare(program: progen.Program, ran: dict) -> Attempt:
    """Find the error and apply its preferred fix; the outcome stays empty if the fixed program is to be run."""
    a = Attempt(program, ran)
    finding = next((f for f in analyze(program.source)
                    if f.span.line == ran["line"] and progen.PREDICTS[f.code] == ran["kind"]), None)
    fix = next(iter(verified(program.source, finding)), None) if finding else None  # what the editor offers
    if finding is None:
        a.outcome = "no_finding"
    elif fix is None:
        a.outcome, a.detail = "no_fix", f"{finding.code} ({finding.name}) offers no preferred fix"
    else:
        a.title = fix.title
        reps = replacements(program.source, fix)
        if not reps:
            a.outcome, a.detail = "edit_failed", f"no replacement for edits {' '.join(fix.kinds)}"
            return a
        a.fixed = apply(program.source, reps)
        try:
            ast.parse(a.fixed)
        except SyntaxError as e:
            a.outcome, a.detail = "edit_failed", f"does not parse: {e.msg}"
            return a
        # an error torch met first may have hidden another: fix what is left, as `--fix --unsafe-fixes` does
        a.fixed, more = fix_all(a.fixed, program.name, Config(), unsafe=True)
        a.title += "".join(f" + {t}" for t in more[:1])
    return a


def finish(a: Attempt, result: dict) -> None:
    """The outcome of a fixed program from its run and GradGuard's findings on it."""
    left = predicted(a.fixed)
    if result["kind"] == "clean":
        a.outcome = "still_flagged" if left else "runs_clean"
        a.detail = ", ".join(sorted({f"{code} ({kind})" for _, kind, code in left}))
        a.where = ", ".join(f"{code}@{line}" for line, _, code in left)
        return
    line = result["line"]
    a.outcome = "raises_same" if result["kind"] == a.ran["kind"] else "raises_other"
    a.detail = f"{a.ran['kind']} -> {gist(result)}"
    statement = a.fixed.splitlines()[line - 1].strip() if line else "?"
    seen = [code for at, kind, code in left if (at, kind) == (line, result["kind"])]
    a.where = f"(line {line}: `{statement}`; GradGuard {' '.join(seen) or 'does not predict it'})"


def corpus_programs() -> tuple[list[progen.Program], dict]:
    """The corpus cases as programs, with their manifest labels."""
    programs, results = [], {}
    for case in manifest():
        source = (CORPUS / case["file"]).read_text(encoding="utf-8")
        programs.append(progen.Program(case["id"], source, (f"corpus:{case['kind']}",)))
        results[case["id"]] = {"kind": case["kind"], "line": case["line"], "message": ""}
    return programs, results


def dir_programs(directory: Path, tmp: Path) -> tuple[list[progen.Program], dict]:
    """The scripts of a directory as programs (motif dir:NAME), labelled by running them."""
    (tmp / "cases").mkdir(parents=True)
    programs = []
    for path in sorted(directory.glob("*.py")):
        source = path.read_text(encoding="utf-8")
        (tmp / "cases" / path.name).write_text(source, encoding="utf-8")
        programs.append(progen.Program(path.stem, source, (f"dir:{directory.name}",)))
    results = run_oracle(tmp, [f"{p.name}.py" for p in programs])
    return programs, {p.name: results[f"{p.name}.py"] for p in programs}


def rate_line(label: str, attempts: list[Attempt]) -> str:
    found = [a for a in attempts if a.outcome != "no_finding"]
    clean = sum(a.outcome in RAN_CLEAN for a in found)
    silent = sum(a.outcome == "runs_clean" for a in found)
    counts = Counter(a.outcome for a in attempts)
    return (f"{label:10} {clean / max(1, len(found)):6.1%} run clean ({clean}/{len(found)} crashing programs "
            f"with a finding; {silent} of them with GradGuard silent after)\n{'':11}"
            + ", ".join(f"{o} {counts[o]}" for o in ("no_finding", "runs_clean", *FAILURES)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("-n", type=int, default=600, help="how many generated programs (default: 600)")
    parser.add_argument("--corpus", action="store_true", help="also the corpus (../shared/corpus)")
    parser.add_argument("--dir", type=Path, help="also every script in DIR, labelled by running it")
    parser.add_argument("--list", action="store_true", help="print every failure")
    parser.add_argument("--show", action="append", default=[], metavar="NAME",
                        help="print a program, its preferred fix and the fix's diff")
    args = parser.parse_args()

    generated = progen.generate(args.seed, args.n)
    corpus, corpus_results = corpus_programs() if args.corpus else ([], {})
    if args.dir:
        with tempfile.TemporaryDirectory(prefix="gg_dir_") as tmp:
            scripts, script_results = dir_programs(args.dir, Path(tmp))
        corpus, corpus_results = corpus + scripts, {**corpus_results, **script_results}
    by_name = {p.name: p for p in generated + corpus}
    unknown = [name for name in args.show if name not in by_name]
    if unknown:
        parser.error(f"no program {', '.join(unknown)} among the first {args.n} of seed {args.seed}"
                     + ("" if args.corpus else " (corpus cases need --corpus)"))
    with tempfile.TemporaryDirectory(prefix="gg_fixes_") as tmp:
        try:
            results = {**progen.label(generated, Path(tmp) / "programs"), **corpus_results}
            crashing = [p for p in generated + corpus if results[p.name]["kind"] not in ("clean", *progen.BROKEN)]
            attempts = [prepare(p, results[p.name]) for p in crashing]
            to_run = [a for a in attempts if not a.outcome]
            (Path(tmp) / "fixed" / "cases").mkdir(parents=True)
            for a in to_run:
                (Path(tmp) / "fixed" / "cases" / f"{a.program.name}.py").write_text(a.fixed, encoding="utf-8")
            fixed_results = run_oracle(Path(tmp) / "fixed", [f"{a.program.name}.py" for a in to_run])
        except pytest.skip.Exception as e:
            parser.error(str(e))
    for a in to_run:
        finish(a, fixed_results[f"{a.program.name}.py"])

    broken = sum(results[p.name]["kind"] in progen.BROKEN for p in generated)
    in_corpus = {p.name for p in corpus}
    print(f"generated: {len(generated)} programs (seed {args.seed}), {broken} dropped as generator bugs, "
          f"{sum(a.program.name not in in_corpus for a in attempts)} crashing")
    print(rate_line("generated", [a for a in attempts if a.program.name not in in_corpus]))
    if args.corpus:
        print(rate_line("corpus", [a for a in attempts if a.program.name in in_corpus
                                   and not a.program.motifs[0].startswith("dir:")]))
    if args.dir:
        print(rate_line(args.dir.name, [a for a in attempts if a.program.motifs[0].startswith("dir:")]))
    if args.corpus or args.dir:
        print(rate_line("overall", attempts))

    found = [a for a in attempts if a.outcome != "no_finding"]
    by_motif = defaultdict(list)
    for a in found:
        for motif in a.program.motifs:
            by_motif[motif].append(a)
    print("\nmotifs with a failing fix (of the crashing programs with a finding; example: the shortest failure):")
    print(f"  {'motif':48} {'found':>5} {'clean':>5} {'rate':>5}  " + " ".join(f"{h:>7}" for h in FAILURES.values())
          + "  example")
    for motif, group in sorted(by_motif.items(),
                               key=lambda item: (sum(a.outcome in RAN_CLEAN for a in item[1]) / len(item[1]), item[0])):
        failed = [a for a in group if a.outcome in FAILURES]
        if not failed:
            continue
        counts = Counter(a.outcome for a in group)
        clean = counts["runs_clean"] + counts["still_flagged"]
        example = min(failed, key=lambda a: len(a.program.source)).program.name
        print(f"  {motif:48} {len(group):5} {clean:5} {clean / len(group):5.0%}  "
              + " ".join(f"{counts[o]:7}" for o in FAILURES) + f"  {example}")

    groups = defaultdict(list)
    for a in found:
        if a.outcome in FAILURES:
            groups[a.outcome, re.sub(r" on line \d+", "", a.title), a.detail].append(a)
    if groups:
        print("\nfailures by outcome, fix and error (count, then the shortest example):")
    for (outcome, title, detail), group in sorted(groups.items(), key=lambda item: (-len(item[1]), item[0])):
        example = min(group, key=lambda a: len(a.program.source))
        print(f"  {len(group):4} {outcome}: {title or '-'}\n"
              f"       {detail}\n       e.g. {example.program.name} {example.where}")
    if args.list:
        print()
        for a in found:
            if a.outcome in FAILURES:
                print(a.describe())
    attempt = {a.program.name: a for a in attempts}
    for name in args.show:
        ran = results[name]
        print(f"\n# {name}: ran {ran['kind']}" + (f"@{ran['line']}: {ran['message']}" if ran["line"] else ""))
        print(by_name[name].source, end="")
        a = attempt.get(name)
        if a:
            print(f"# {a.describe()}")
        if a and a.fixed:
            print("".join(difflib.unified_diff(a.program.source.splitlines(True), a.fixed.splitlines(True),
                                               f"{name}.py", f"{name}.py (fixed)")), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
