"""Whether two versions of the engine find the same things: codes, ranges, messages, fixes.

    python bench/compare_engines.py BASE [-n N] [--realworld DIR] [--show K]

BASE is a checkout of the engine to compare with (a `git worktree` of the commit a change
started from).  Both engines check, each in a process of its own with the same settings
and no time limit (the work budgets, which do not depend on the machine, still apply):
../shared/corpus, tests/programs, tests/projects (each file with its project's imports),
N programs of the differential generator (tests/progen.py, seed 0; 3,000 by default) and,
with --realworld, every `.py` file under DIR (../shared/realworld/checkout.sh makes one).
Prints how many files each set has and how many differ, then the first K differences
(default 10) as the two engines' findings.  Exits 1 when any file differs.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"

# A checking process: the engine on its `sys.path` (argv[1]), the files listed in argv[2], one
# JSON line of findings per file written to argv[3].
WORKER = r"""
import dataclasses, json, sys
sys.path.insert(0, sys.argv[1])
from gradguard.api import check_file
from gradguard.config import Config
config = Config(timeout=1e9)
with open(sys.argv[2]) as files, open(sys.argv[3], "w") as out:
    for line in files:
        path = line.rstrip("\n")
        found = [dataclasses.asdict(f) for f in check_file(path, config).findings]
        for f in found:
            f.pop("severity", None)
        out.write(json.dumps([path, found], default=str) + "\n")
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", type=Path, help="a checkout of the engine to compare with")
    parser.add_argument("-n", type=int, default=3000, help="generated programs (default: 3000)")
    parser.add_argument("--realworld", type=Path, metavar="DIR", help="also every .py file under DIR")
    parser.add_argument("--show", type=int, default=10, metavar="K", help="differences to print (default: 10)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gg_compare_") as tmp:
        sets = _sets(Path(tmp), args.n, args.realworld)
        files = [f for fs in sets.values() for f in fs]
        new, old = _run_both(files, ROOT / "server", args.base / "server", Path(tmp))
        differing = [f for f in files if new.get(f) != old.get(f)]
        for name, fs in sets.items():
            print(f"{name:12} {len(fs):6} files, {sum(f in set(differing) for f in fs)} differ")
        for f in differing[: args.show]:
            print(f"\n{f}\n  base: {json.dumps(old.get(f))}\n  this: {json.dumps(new.get(f))}")
    return 1 if differing else 0


def _sets(tmp: Path, n: int, realworld: Path | None) -> dict:
    sys.path[:0] = [str(ROOT / "server"), str(ROOT / "tests")]
    import progen  # the differential generator

    generated = []
    for p in progen.generate(0, n):
        path = tmp / f"{p.name}.py"
        path.write_text(p.source, encoding="utf-8")
        generated.append(str(path))
    out = {
        "corpus": sorted(str(p) for p in CORPUS.rglob("*.py") if p.name != "oracle.py"),
        "programs": sorted(str(p) for p in (ROOT / "tests" / "programs").rglob("*.py")),
        "projects": sorted(str(p) for p in (ROOT / "tests" / "projects").rglob("*.py")),
        "generated": generated,
    }
    if realworld is not None:
        out["realworld"] = sorted(str(p) for p in realworld.rglob("*.py") if p.is_file())
    return out


def _run_both(files: list, new_server: Path, old_server: Path, tmp: Path) -> tuple[dict, dict]:
    """Each engine's findings by file, both checking at once (one core each)."""
    listing = tmp / "files.txt"
    listing.write_text("".join(f + "\n" for f in files), encoding="utf-8")
    outs = [tmp / "new.jsonl", tmp / "old.jsonl"]
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(server), str(listing), str(out)])
             for server, out in zip((new_server, old_server), outs)]
    for p in procs:
        p.wait()
    return tuple(dict(json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()) for out in outs)


if __name__ == "__main__":
    sys.exit(main())
