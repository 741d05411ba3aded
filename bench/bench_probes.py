"""GradGuard on the probe sets: crashes found at the raising line with the right kind, twins flagged.

    python bench/bench_probes.py [--oracle] [--fixes] [DIR ...]

DIR defaults to every set in bench/probes/ (see its README); a set of projects of several
modules (`modules_a`) is measured with its imports and as the same programs in one file
(`measure_modules`; --oracle and --fixes do not apply to it).  Each program's label is its
`# expect: KIND` header and its `# raises` line; with --oracle each is also run under torch
(../shared/corpus/oracle.py) and a label torch disagrees with is reported.  With --fixes,
each crash found gets the preferred confirmed fix of every finding (`--fix --unsafe-fixes`)
and is run under torch: the count of those that then run clean is the preferred-fix rate.
Prints, per set, what was missed and flagged and the counts; exits 0 (a measurement, not a
test).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from corpus_support import expectation  # noqa: E402
from gradguard.explain import classify  # noqa: E402
from gradguard.api import check_file  # noqa: E402
from gradguard.config import Config  # noqa: E402
from gradguard.rules import ALL_RULES  # noqa: E402
from gradguard.verify import fix_all  # noqa: E402

HERE = Path(__file__).resolve().parent
ORACLE = HERE.parents[1] / "shared" / "corpus" / "oracle.py"
PREDICTS = {rule.code: rule.predicts for rule in ALL_RULES}


def run(path: Path) -> dict:
    """The oracle's outcome of running one program under torch, its kind read from the message
    for the kinds the shared oracle does not know (`numpy_requires_grad`, ...)."""
    ran = json.loads(subprocess.run([sys.executable, str(ORACLE), "--run", str(path)], capture_output=True,
                                    text=True).stdout or "{}")
    kind = classify(ran.get("message") or "") if ran.get("kind") == "other_error" else None
    return dict(ran, kind=kind) if kind else ran


def runs_after_fix(path: Path) -> bool:
    fixed = fix_all(path.read_text(encoding="utf-8"), path.name, Config(), unsafe=True)[0]
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / path.name
        target.write_text(fixed, encoding="utf-8")
        ran = run(target)
    if ran.get("kind") != "clean":
        print(f"  UNFIXED  {path.name}: after the fix, {ran.get('kind')} at line {ran.get('line')}")
    return ran.get("kind") == "clean"


def measure(directory: Path, oracle: bool, fixes: bool) -> None:
    found = crashes = flagged = clean = repaired = 0
    for path in sorted(directory.glob("*.py")):
        kind, line = expectation(path)  # `# expect: KIND` and the `# raises` line
        if oracle:
            ran = run(path)
            if (ran.get("kind"), ran.get("line")) != (kind, line):
                print(f"  LABEL    {path.name}: labelled {kind} {line}, torch: {ran.get('kind')} {ran.get('line')}")
        result = check_file(path, Config())
        predicted = {(f.span.line, PREDICTS[f.code]) for f in result.findings if PREDICTS.get(f.code)}
        if result.error:
            print(f"  ERROR    {path.name}: {result.error}")
        if kind == "clean":
            clean += 1
            flagged += bool(predicted)
            if predicted:
                print(f"  FLAGGED  {path.name}: {sorted(predicted)}")
        else:
            crashes += 1
            found += (line, kind) in predicted
            if (line, kind) not in predicted:
                print(f"  MISSED   {path.name}: {kind} at line {line}; predicted {sorted(predicted)}")
            elif fixes:
                repaired += runs_after_fix(path)
    print(f"{directory.name}: crashes found {found}/{crashes}; fixed twins flagged {flagged}/{clean}"
          + (f"; found crashes that run clean after the preferred fix {repaired}/{found}" if fixes else ""))


def measure_modules(directory: Path) -> None:
    """A set of projects (`NAME/crash/train.py` with its modules, `NAME/fixed/`, and the same
    programs in one file, `NAME/onefile_crash.py` and `NAME/onefile_fixed.py`): each checked by
    the command line, with `NAME/external` (`external_fixed` for the fixed twin, if any) on
    PYTHONPATH, as a package installed outside the project would be."""
    directory = directory.resolve()
    found = {"modules": 0, "onefile": 0}
    alike = crashes = flagged = clean = 0
    for project in sorted(p for p in directory.iterdir() if (p / "crash" / "train.py").exists()):
        external = project / "external"
        fixed_external = project / "external_fixed" if (project / "external_fixed").exists() else external
        hits = {}
        for form, path, extra in (("modules", project / "crash" / "train.py", external),
                                  ("onefile", project / "onefile_crash.py", None),
                                  ("modules", project / "fixed" / "train.py", fixed_external),
                                  ("onefile", project / "onefile_fixed.py", None)):
            kind, line = expectation(path)
            predicted = _cli_predictions(path, extra if extra is not None and extra.exists() else None)
            name = path.relative_to(directory)
            if kind == "clean":
                clean += 1
                flagged += bool(predicted)
                if predicted:
                    print(f"  FLAGGED  {name}: {sorted(predicted)}")
                continue
            crashes += 1
            hits[form] = (line, kind) in predicted
            found[form] += hits[form]
            if not hits[form]:
                print(f"  MISSED   {name}: {kind} at line {line}; predicted {sorted(predicted)}")
        alike += hits["modules"] == hits["onefile"]
    projects = crashes // 2
    print(f"{directory.name}: crashes found {found['modules']}/{projects} with imports, {found['onefile']}/{projects} "
          f"in one file ({alike}/{projects} alike); fixed twins flagged {flagged}/{clean}")


def _cli_predictions(path: Path, pythonpath: Path | None) -> set:
    """(line, kind) of the predicting findings of `gradguard check` on `path`, run from its directory."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    proc = subprocess.run([sys.executable, "-m", "gradguard", "check", "--no-cache", "--output-format", "json",
                           str(path)], capture_output=True, text=True, env=env, cwd=path.parent)
    return {(f["line"], PREDICTS[f["code"]]) for f in json.loads(proc.stdout)["findings"] if PREDICTS.get(f["code"])}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="*", type=Path, help="probe sets (default: every one in bench/probes)")
    parser.add_argument("--oracle", action="store_true", help="also run each program under torch")
    parser.add_argument("--fixes", action="store_true", help="run each crash found after its preferred fix")
    args = parser.parse_args()
    for directory in args.dirs or sorted(p for p in (HERE / "probes").iterdir() if p.is_dir()):
        if next(directory.glob("*/crash/train.py"), None) is not None:
            measure_modules(directory)
        else:
            measure(directory, args.oracle, args.fixes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
