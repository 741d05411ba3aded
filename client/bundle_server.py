"""Build the server bundled in the VS Code extension: client/bundled/libs.

It holds gradguard (copied from server/gradguard) and the pure-Python packages pinned in
client/bundled-requirements.txt, installed by pip as py3-none-any wheels that run on Python
3.9 and later.  libcst is left out on purpose: its wheels are compiled per platform and
Python version, so one .vsix could not carry it for every user; the bundled server uses the
environment's libcst, which only quick fixes need (gradguard imports it on the first resolve).

Run by `npm run bundle-server` (part of `npm run package`), with any Python 3.9+ that has pip:
pip uses its configured index, the same one that installs the project's own dependencies.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

CLIENT = Path(__file__).resolve().parent
REPO = CLIENT.parent
LIBS = CLIENT / "bundled" / "libs"
REQUIREMENTS = CLIENT / "bundled-requirements.txt"
SOURCE = REPO / "server" / "gradguard"
MIN_PYTHON = "3.9"


def main() -> int:
    if LIBS.exists():
        shutil.rmtree(LIBS)
    LIBS.mkdir(parents=True)
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
               "--target", str(LIBS), "--no-deps", "--no-compile", "--only-binary=:all:",
               "--implementation", "py", "--abi", "none", "--platform", "any", "--python-version", MIN_PYTHON,
               "-r", str(REQUIREMENTS)]
    proc = subprocess.run(command, check=False)
    if proc.returncode != 0:
        print(f"bundle_server: pip failed ({proc.returncode}): {' '.join(command)}", file=sys.stderr)
        return 1
    shutil.copytree(SOURCE, LIBS / "gradguard", ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".*"))
    for extra in ("bin",):  # console scripts of the wheels: nothing the server runs
        shutil.rmtree(LIBS / extra, ignore_errors=True)
    native = [p for p in LIBS.rglob("*") if p.suffix in (".so", ".pyd", ".dylib")]
    if native:
        print(f"bundle_server: compiled files would tie the bundle to one platform: {native}", file=sys.stderr)
        return 1
    size = sum(p.stat().st_size for p in LIBS.rglob("*") if p.is_file())
    print(f"bundle_server: {LIBS.relative_to(REPO)}: gradguard + {REQUIREMENTS.name} ({size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
