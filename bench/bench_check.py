"""How fast GradGuard analyses real code, measured against `ast.parse` of the same texts.

    python bench/bench_check.py [PATH ...] [--limit N] [--cli]

PATH defaults to the installed torch package, found without importing torch.  The files are
read and decoded first; then one pass times `ast.parse` over every text and a second pass
times `gradguard.api.check_source` (analysis, selection and noqa, as `gradguard check` runs
them) over the same texts.  The goal is analysis at most 4x the time of `ast.parse`.  With
--cli it also times the command itself on a copy of the files: `gradguard check` without the
cache, with a cold cache (on every core), and again with the cache warm, each as a ratio to
`ast.parse` (per core for the parallel runs) and the warm run as a share of the cold one.
It only reports: no assertion, since timings depend on the machine.
"""
from __future__ import annotations

import argparse
import ast
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))  # bench this checkout

from gradguard.api import check_source, iter_python_files  # noqa: E402
from gradguard.encoding import decode  # noqa: E402
from gradguard.config import Config  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", metavar="PATH", help="files or directories (default: torch)")
    parser.add_argument("--limit", type=int, metavar="N", help="only the first N files")
    parser.add_argument("--cli", action="store_true", help="also time `gradguard check`, without and with its cache")
    args = parser.parse_args()
    paths = args.paths or list(importlib.util.find_spec("torch").submodule_search_locations)
    warnings.simplefilter("ignore")  # invalid escapes in the benched code are not ours to report

    texts = []
    for path in list(iter_python_files(paths))[:args.limit]:
        try:
            texts.append((str(path), decode(path.read_bytes())))
        except (OSError, SyntaxError, UnicodeDecodeError, LookupError):
            pass
    if not texts:
        parser.error("no readable Python files under " + " ".join(paths))
    lines = sum(text.count("\n") for _, text in texts)

    start = time.perf_counter()
    for path, text in texts:
        try:
            ast.parse(text, path)
        except SyntaxError:
            pass
    parse_seconds = time.perf_counter() - start

    config = Config(timeout=600.0)  # measure every file to the end
    errors = []
    start = time.perf_counter()
    for path, text in texts:
        result = check_source(text, path, config)
        if result.error:
            errors.append(result.error)
    check_seconds = time.perf_counter() - start

    print(f"files:       {len(texts)} ({len(errors)} not analysed: syntax errors, timeouts or internal errors)")
    print(f"lines:       {lines}")
    print(f"ast.parse:   {parse_seconds:8.2f} s  {lines / parse_seconds:10.0f} lines/s")
    print(f"gradguard:   {check_seconds:8.2f} s  {lines / check_seconds:10.0f} lines/s")
    print(f"ratio:       {check_seconds / parse_seconds:8.2f}x ast.parse (goal: at most 4x)")
    for error in errors[:20]:
        print("  " + error)
    if args.cli:
        cli(texts, parse_seconds)
    return 0


def cli(texts, parse_seconds: float) -> None:
    """`gradguard check` on a copy of the files: one process and no cache, then every core
    with a cold cache, then the same run again (warm)."""
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="gg_bench_") as tmp:
        for n, (_, text) in enumerate(texts):
            (Path(tmp) / f"f{n:06d}.py").write_text(text, encoding="utf-8", errors="surrogatepass")
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "server")}

        def run(*options) -> float:
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "gradguard", "check", "--timeout", "600", *options, "."],
                           cwd=tmp, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
            return time.perf_counter() - start
        single = run("--no-cache", "-j", "1")
        cold = run()
        warm = run()
        shutil.rmtree(Path(tmp) / ".gradguard_cache", ignore_errors=True)
    print(f"cli, 1 process, no cache: {single:8.2f} s  {single / parse_seconds:6.2f}x ast.parse")
    print(f"cli, {cores} processes, cold: {cold:8.2f} s  {cold * cores / parse_seconds:6.2f}x ast.parse per core "
          f"(goal: at most 3x)")
    print(f"cli, warm cache:          {warm:8.2f} s  {warm / cold:6.1%} of cold (goal: at most 5%)")


if __name__ == "__main__":
    sys.exit(main())
