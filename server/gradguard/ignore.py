"""Which paths a walk passes over: git's ignore files and the settings' `exclude`, both with
git's semantics (`**`, `!` to re-include, a leading `/` anchors, a trailing `/` names
directories only); pathspec compiles the patterns.

git decides each entry of a directory on its own as it walks down: the deepest ignore file
with a pattern naming the entry decides, the last such pattern in it wins, and nothing below an
ignored directory is looked at, so nothing there can be re-included.  A walk here does the same
(`Ignores.ignored`, `Patterns.decide` for one entry); a path named on the command line, with
`force-exclude`, is decided the way git would reach it: each directory above it first
(`Patterns.covers`, `Ignores.covers`).  Ignore files count inside a git repository only (a
directory with a `.git` at or above it), as for git and ruff: an exported tarball is walked whole.
"""
from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from pathspec import GitIgnoreSpec

# pathspec's name for the `/` that ends a directory in the regular expression of a pattern that
# can name one: a match whose `/` comes before the path's end named a directory above the path
_DIRECTORY_MARK = "ps_d"


class Patterns:
    """Gitignore lines whose paths are relative to one directory (`base`)."""

    def __init__(self, base: Path, lines: Iterable[str]):
        self.base = base
        self.patterns = [p for p in GitIgnoreSpec.from_lines(list(lines)).patterns if p.include is not None]

    def decide(self, path: Path, is_dir: bool) -> bool | None:
        """True if a pattern ignores `path` itself, False if a `!` pattern re-includes it, None
        if no pattern names it (nor when it is not below `base`)."""
        try:
            rel = path.relative_to(self.base).as_posix()
        except ValueError:
            return None
        if rel == ".":
            return None
        for pattern in reversed(self.patterns):
            marked = _DIRECTORY_MARK in pattern.regex.groupindex
            target = rel + "/" if is_dir and marked else rel  # `dir/**` matches below dir, not dir
            match = pattern.regex.match(target)
            if match is not None and (not marked or match.end(_DIRECTORY_MARK) in (-1, len(target))):
                return pattern.include
        return None

    def covers(self, path: Path, is_dir: bool) -> bool:
        """Whether `path`, or a directory between `base` and it, is ignored."""
        return _reached(lambda p, d: self.decide(p, d) is True, path, is_dir, self.base)


@functools.lru_cache(maxsize=256)
def patterns(base: Path, lines: tuple[str, ...]) -> Patterns:
    """`Patterns`, compiled once per process for the same lines (the settings of a project)."""
    return Patterns(base, lines)


class Ignores:
    """The ignore files of the git repositories a run meets: each directory's `.gitignore`,
    and `.git/info/exclude` below the others; each read once."""

    def __init__(self):
        self._levels: dict[Path, list[Patterns]] = {}
        self._roots: dict[Path, Path | None] = {}

    def ignored(self, path: Path, is_dir: bool) -> bool:
        """Whether git ignores this entry of its directory (`path` absolute, its directory not ignored)."""
        for level in self._levels_of(path.parent):
            decided = level.decide(path, is_dir)
            if decided is not None:
                return decided
        return False

    def covers(self, path: Path, is_dir: bool) -> bool:
        """Whether git ignores `path` or a directory above it (`path` absolute)."""
        root = self._root(path.parent)
        return root is not None and _reached(self.ignored, path, is_dir, root)

    def _root(self, directory: Path) -> Path | None:
        """The top of the git work tree holding `directory`, if any."""
        if directory not in self._roots:
            if os.path.lexists(directory / ".git"):
                self._roots[directory] = directory
            else:
                self._roots[directory] = None if directory.parent == directory else self._root(directory.parent)
        return self._roots[directory]

    def _levels_of(self, directory: Path) -> list[Patterns]:
        """The ignore files that apply in `directory`, the deepest first."""
        if directory not in self._levels:
            root = self._root(directory)
            if root is None:
                levels = []
            else:
                above = [_read(root, root / ".git" / "info" / "exclude")] if directory == root else \
                    self._levels_of(directory.parent)
                levels = [_read(directory, directory / ".gitignore"), *above]
            self._levels[directory] = [level for level in levels if level is not None]
        return self._levels[directory]


def _read(base: Path, path: Path) -> Patterns | None:
    """The patterns of an ignore file; None for a missing or unreadable one (git skips it too),
    or one that is not a regular file (reading a FIFO would block the walk)."""
    if not path.is_file():
        return None
    try:
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
    except OSError:
        return None
    return Patterns(base, text.splitlines())


def _reached(ignored: Callable[[Path, bool], bool], path: Path, is_dir: bool, top: Path) -> bool:
    """Whether a walk down from `top` passes over `path`: it or a directory on the way is ignored."""
    try:
        steps = path.relative_to(top).parts
    except ValueError:
        return False
    directory = top
    for i, name in enumerate(steps):
        directory = directory / name
        if ignored(directory, is_dir or i < len(steps) - 1):
            return True
    return False
