"""Where an import leads inside the user's project: a file to read and parse, never code to run.

`train.py` doing `from utils import detach_state` or `from .models import Net` names a file
of the workspace; the engine reads it and follows calls into it as it follows calls within
one file.  An import resolves, as Python's path search would for a script run from its own
directory or a package of the project, against: for a relative import, the importing file's
package; otherwise the importing file's directory, then the project root (the directory of
the `pyproject.toml` the settings came from, else the nearest one above the importing file
with a project marker) and its `src/`.  What resolves to no file
there (torch, numpy, an installed package) stays opaque, and no predicting finding rests on
what an opaque call does.

Modules are parsed once per content: the cache keys on the file's modification time and
size, so an edited module is read again.  An editor's unsaved text for a module can be given
(`overlay`), so a change in `models.py` shows in `train.py` before it is saved.
"""
from __future__ import annotations

import ast
import os
import re
import sys
import warnings
from collections import OrderedDict
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path

from gradguard.encoding import decode
from gradguard.environment import user_code
from gradguard.ids import number
from gradguard.spans import LINE_BREAK, Positions

# Parsed modules kept for the next analysis (a walk checks neighbours, which import alike): at
# most this many, and this much text between them, as a tree with its ids takes some eighty
# times its text's memory (16 modules of a large project's 50 KB each were 64 MB per process).
KEPT = 16
KEPT_TEXT = 200_000
MAX_BYTES = 200_000  # a module bigger than this stays opaque: its analysis would not fit a file's budget


@dataclass(eq=False)
class Module:
    """A parsed module of the workspace."""

    path: str
    source: str
    tree: ast.Module

    def __getstate__(self) -> dict:
        return {"path": self.path, "source": self.source, "tree": self.tree}  # not the cached properties

    @cached_property
    def lines(self) -> list[str]:
        return LINE_BREAK.split(self.source)

    @cached_property
    def positions(self) -> Positions:
        return Positions(self.source)


MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")
_ALL = re.compile(r"^__all__\s*(?::[^=]*)?=\s*[\[(]([^\])]*)[\])]", re.M)
_QUOTED = re.compile(r"""["']([A-Za-z_]\w*)["']""")
_TOP_NAME = re.compile(r"^(?:async\s+)?(?:def|class)\s+(\w+)|^(\w+)\s*(?::[^=\n]*)?=[^=]", re.M)
_TOP_IMPORT = re.compile(r"^(?:from\s+\S+\s+)?import\s+([\w ,.]+)$", re.M)


@lru_cache(maxsize=4)  # asked twice per analysis of a tree; a bigger cache kept every tree checked alive
def top_imports(tree: ast.Module) -> list[tuple[str, int, tuple[str, ...]]]:
    """Each module the top level of `tree` imports, as (module, level, the names it binds to
    that module's own names): `from steps import train_step` is ("steps", 0, ("train_step",)),
    and `import steps` or `from pkg import steps` name a module whose functions are called as
    `steps.f(...)`: ("steps", 0, ()) and ("pkg.steps", 0, ())."""
    out = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            out += [(alias.name, 0, ()) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = tuple(alias.asname or alias.name for alias in node.names if alias.name != "*")
            if node.module:
                out.append((node.module, node.level, names))
            prefix = f"{node.module}." if node.module else ""
            out += [(prefix + alias.name, node.level, ()) for alias in node.names if alias.name != "*"]
    return out


_FROM_IMPORT = re.compile(r"^from[ \t]+(\.*)[ \t]*([\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)", re.M)


@lru_cache(maxsize=64)
def reexports(text: str) -> tuple[dict, list]:
    """What a module's top-level `from <dots><module> import ...` statements bind (not those under
    an `if TYPE_CHECKING:` or a `try:`), read from its text: {name: [(dots, module, the name
    there)]} (`from .policy import SACPolicy`, `from .policy import Policy as SACPolicy`), and
    [(dots, module)] of its star imports.  Once per text: a package's `__init__` is asked for
    every name a file imports from it."""
    named: dict = {}
    starred = []
    for found in _FROM_IMPORT.finditer(text):
        for alias in re.sub(r"#[^\n]*", "", found.group(3)).strip("() \t\n").split(","):
            parts = alias.split()
            if parts == ["*"]:
                starred.append((found.group(1), found.group(2)))
            elif len(parts) in (1, 3) and parts[0].isidentifier():
                named.setdefault(parts[-1], []).append((found.group(1), found.group(2), parts[0]))
    return named, starred


def project_root(directory: Path) -> Path | None:
    """The nearest directory at or above `directory` that holds a project marker (a
    `pyproject.toml`, `setup.py`, `setup.cfg` or `.git`): where the project's absolute
    imports start, as for pyright's execution root."""
    for d in (directory, *directory.parents):
        if any((d / m).exists() for m in MARKERS):
            return d
    return None


class Workspace:
    def __init__(self, root: str | os.PathLike | None = None, overlay: dict[str, str] | None = None,
                 python: str = sys.executable):
        self.root = Path(root).resolve() if root is not None else None
        self.python = python  # the interpreter whose installed development packages imports may name
        self.overlay = {str(Path(p).resolve()): text for p, text in (overlay or {}).items()}
        self._parsed: OrderedDict[str, tuple] = OrderedDict()  # path -> (stamp, Module | None), last used last
        self._found: dict[tuple, Path | None] = {}  # (directory, module, level) -> the file it resolved to

    def use(self, python: str) -> None:
        """Resolve imports as the interpreter `python` finds the user's code from now on (a
        project's `python` setting may name one)."""
        if python != self.python:
            self.python = python
            self._found.clear()

    def set_text(self, path: str, text: str | None) -> None:
        """The editor's text of an open file (None: closed, read from disk again)."""
        key = str(Path(path).resolve())
        if text is None:
            self.overlay.pop(key, None)
        else:
            if key not in self.overlay:
                self._found.clear()  # a new file may be what an import names
            self.overlay[key] = text

    def resolve(self, importer: str, module: str, level: int = 0) -> Module | None:
        """The module `from <level dots><module> import ...` in file `importer` names, or None.
        Where a name led is remembered (files appearing later are seen after `set_text` or in
        a new workspace); the module's text is checked for changes on every resolve."""
        found = self.located(importer, module, level)
        return self._load(found) if found is not None else None

    def located(self, importer: str, module: str, level: int = 0) -> Path | None:
        """The file the import names, found once per directory, module and level."""
        here = Path(importer).parent
        key = (here, module, level)
        if key not in self._found:
            self._found[key] = self._find(here.resolve(), module, level)
        return self._found[key]

    def exported(self, importer: str, module: str, level: int = 0) -> list[str] | None:
        """The names `from <module> import *` binds, read from the text without parsing it (a
        package's `__init__` may star-import a hundred modules the file never uses): `__all__`
        when it is a literal list, else the public names its top level defines or imports.
        None when the import leads outside the workspace."""
        text = self.text(importer, module, level)
        if text is None:
            return None
        listed = _ALL.search(text)
        if listed:
            return _QUOTED.findall(listed.group(1))
        names = {m.group(1) or m.group(2) for m in _TOP_NAME.finditer(text)}
        names |= {alias.split(" as ")[-1].strip() for m in _TOP_IMPORT.finditer(text) for alias in m.group(1).split(",")}
        return sorted(n for n in names if n and n.isidentifier() and not n.startswith("_"))

    def text(self, importer: str, module: str, level: int = 0) -> str | None:
        """The text of the module an import names, read without parsing it (the editor's
        unsaved text if given), or None when the import leads outside the workspace."""
        path = self.located(importer, module, level)
        if path is None:
            return None
        try:
            return self.overlay.get(str(path)) or path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None

    def _find(self, here: Path, module: str, level: int) -> Path | None:
        parts = [p for p in module.split(".") if p]
        if level:
            bases = [here.parents[level - 2] if level > 1 else here] if level - 2 < len(here.parents) else []
        else:
            root = self.root if self.root is not None else project_root(here)
            bases = [here] + ([root, root / "src"] if root is not None else [])
        found = self._in(bases, parts)
        if found is not None or level or not parts:
            return found
        installed = user_code(self.python)  # the user's code outside the project, as the interpreter finds it
        if parts[0] in installed.packages:  # a PEP 660 finder's: the name is a directory of its own
            return self._in([installed.packages[parts[0]]], parts[1:])
        return self._in(installed.paths, parts)

    def _in(self, bases, parts: list) -> Path | None:
        """The module `parts` names in the first of `bases` that has it: `a/b.py` or `a/b/__init__.py`."""
        for base in dict.fromkeys(bases):
            target = base.joinpath(*parts)
            for candidate in ((target.with_name(target.name + ".py"),) if parts else ()) + (target / "__init__.py",):
                if str(candidate.resolve()) in self.overlay or candidate.is_file():
                    return candidate.resolve()
        return None

    def _load(self, path: Path) -> Module | None:
        key = str(path)
        text = self.overlay.get(key)
        try:
            stat = path.stat() if text is None else None
        except OSError:
            return None
        if text is None and (not path.is_file() or stat.st_size > MAX_BYTES):
            return None
        stamp = ("overlay", hash(text)) if text is not None else (stat.st_mtime_ns, stat.st_size)
        cached = self._parsed.get(key)
        if cached is not None:
            self._parsed.move_to_end(key)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        module = None
        try:
            if text is None:
                text = decode(path.read_bytes())
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                tree = ast.parse(text, filename=key)
            module = Module(key, text, number(tree, key))
        except (OSError, SyntaxError, ValueError, UnicodeDecodeError, LookupError, RecursionError, MemoryError):
            module = None  # unreadable or broken: opaque, like a module without source
        self._parsed[key] = (stamp, module)
        while len(self._parsed) > 1 and (len(self._parsed) > KEPT or self._kept_text() > KEPT_TEXT):
            self._parsed.popitem(last=False)
        return module

    def _kept_text(self) -> int:
        return sum(len(module.source) for _, module in self._parsed.values() if module is not None)

