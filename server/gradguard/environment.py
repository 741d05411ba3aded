"""Where the user's interpreter finds the user's own code beyond the project's directories.

An import the project's directories do not resolve may still name code the user writes: a
package installed in development mode (`pip install -e ../mylib`), a directory on
`PYTHONPATH` or named by a `.pth` file.  The interpreter's `sys.path`, as it is after `site`
ran, tells: this process's own when it is the interpreter running GradGuard (less the entry
of the program that started it); another's (the `python` setting) from jedi, which asks a
subprocess of it, once per interpreter and process, so that nothing of that environment
runs in this one.  The entries that hold code are searched after the project's: not the
standard library, and no directory of installed distributions (one holding `*.dist-info`:
site-packages, a `pip --target` directory, the extension's bundled packages).  A package
installed in development mode by a PEP 660 finder (setuptools' `__editable___*_finder.py` in
site-packages, which maps each top-level name to its source directory) is found through that
mapping, read from the finder's text.  What is installed stays opaque, as before.

The interpreter is the `python` setting's, else the one that runs the analysis: the command
line's, or the language server's, which the editor starts with the interpreter it has
selected (or the `gradguard.interpreter` setting).
"""
from __future__ import annotations

import ast
import os
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path


@dataclass(frozen=True)
class UserCode:
    """The user's code the interpreter can import, besides the project's directories."""

    paths: tuple[Path, ...] = ()  # `sys.path` entries of the user's code, in `sys.path` order
    packages: dict = field(default_factory=dict)  # top-level name -> its directory (PEP 660 finders)

    def key(self) -> tuple:
        """What a result that resolved imports depends on (for the command line's cache)."""
        return tuple(map(str, self.paths)), tuple(sorted((k, str(v)) for k, v in self.packages.items()))


@lru_cache(maxsize=4)
def user_code(executable: str) -> UserCode:
    """The user's code `executable` imports from outside the project: nothing if jedi cannot
    ask that interpreter (it is missing, broken, or a version jedi does not know)."""
    if _same(executable):  # this process's path, less the entry of the program that started it
        entries = sys.path[1:]
    else:
        import jedi  # (only here: it weighs a dozen megabytes in every process that imports it)

        try:
            entries = jedi.create_environment(executable, safe=False).get_sys_path()
        except Exception:  # jedi.InvalidPythonEnvironment, an interpreter that died: any reason is as good
            return UserCode()
        entries = [e for e in entries if not Path(e).is_relative_to(Path(jedi.__file__).parent)]  # jedi's helper
    paths, packages = [], {}
    for entry in dict.fromkeys(entries):
        path = Path(entry)
        if not entry or not path.is_absolute() or not path.is_dir():
            continue  # '' (the working directory of whoever runs it), zip files, what is gone
        if _installed(path):
            for finder in sorted(path.glob("__editable___*_finder.py")):
                for name, where in _mapping(finder).items():
                    packages.setdefault(name, Path(where))
        elif not _standard_library(path):
            paths.append(path.resolve())
    return UserCode(tuple(dict.fromkeys(paths)), packages)


def _same(executable: str) -> bool:
    try:
        return os.path.samefile(executable, sys.executable)
    except OSError:
        return False


def _installed(path: Path) -> bool:
    """A directory of installed distributions: site-packages, a `pip --target` directory."""
    return path.name in ("site-packages", "dist-packages") or next(path.glob("*.dist-info"), None) is not None


def _standard_library(path: Path) -> bool:
    return path.name == "lib-dynload" or (path / "os.py").is_file()


def _mapping(finder: Path) -> dict:
    """`MAPPING` of a setuptools editable finder: {top-level name: source directory}."""
    try:
        tree = ast.parse(finder.read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else \
            node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(target, ast.Name) and target.id == "MAPPING" and node.value is not None:
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return {}
            return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)} \
                if isinstance(value, dict) else {}
    return {}
