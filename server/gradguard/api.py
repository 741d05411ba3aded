"""Checking a source text or a file: the engine's findings with the settings and noqa applied.

This is the one place that turns whatever can go wrong with one file (a FIFO or a file too
big to read, bytes that do not decode, a syntax error, a notebook that is not JSON, an
analysis that runs out of time, a bug in the engine) into a one-line `FileResult.error`, so
the command line and the language server never crash or hang on a file and never print a
traceback.  Such a file is reported as a finding of the pseudo-code GG000 (`failure`), as
ruff reports a file that does not parse (E999): every output shows it where it shows
findings, at the line where the analysis stopped.

Notebooks (`.ipynb`) are analysed as one module, their code cells joined in order (see
`gradguard.notebook`); each finding's lines are mapped back to a cell.
"""
from __future__ import annotations

import functools
import os
import re
import stat
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from gradguard.analysis import AnalysisTimeout, TooComplex, run
from gradguard.config import Config
from gradguard.encoding import decode
from gradguard.facts import Facts
from gradguard.findings import FileResult, Finding, Span
from gradguard.ignore import Ignores, patterns
from gradguard.notebook import Cells, locate, notebook_source
from gradguard.reparse import Reparser
from gradguard.suppress import Noqa
from gradguard.workspace import Workspace

SUFFIXES = (".py", ".ipynb")
# Directories a walk passes over; one named on the command line is still checked.
SKIP_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__", ".venv", "venv", ".tox", ".nox",
                       ".mypy_cache", ".pytest_cache", "node_modules", "site-packages",
                       ".ipynb_checkpoints", ".gradguard_cache", ".ruff_cache"})
# The code of a file not analysed (`failure`): no rule module, so it can be neither selected
# out nor silenced by noqa; a file GradGuard could not read must never pass as clean.
NOT_ANALYSED = "GG000"
# Bytes read of one file at most: a bigger "source" is generated data, whose reading and
# parsing alone would stall a run.  A notebook's file is mostly its outputs (plots): more room.
MAX_BYTES = 10 * 2**20
MAX_NOTEBOOK_BYTES = 100 * 2**20
# What a path shown on a line of text must not hold raw: line breaks and terminal controls.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


@dataclass
class Checked(FileResult):
    """A `FileResult` plus what is needed to show it: the kind of error, the notebook cells."""

    internal: bool = False  # `error` is a bug in GradGuard, not a problem of the file
    cause: str | None = None  # `error` without its location: the GG000 message
    at: tuple[int, int] = (1, 0)  # where the analysis stopped: line (of the analysed text), 0-based column
    cells: Cells = ()  # notebook: (first line in the joined text, cell number)
    facts: Facts | None = None  # what the findings rest on (the language server's hover reads it)
    modules: tuple[str, ...] = ()  # paths of the workspace modules the analysis read (its imports)

    def locate(self, line: int) -> tuple[int | None, int]:
        """(cell number, line in the cell) of a line of the analysed text; no cell for a .py file."""
        return locate(self.cells, line)

    def where(self, line: int, column: int) -> str:
        """`path:line:column` (both as given), or `path:cell N:line:column` in a notebook; the
        path `printable`."""
        cell, line = self.locate(line)
        path = printable(self.path)
        return f"{path}:{line}:{column}" if cell is None else f"{path}:cell {cell}:{line}:{column}"

    def where_span(self, span) -> str:
        """`where` for a span of this file, or `module.py:line:column` in an imported module
        (its path relative to the working directory when it is below it)."""
        if span.path is None:
            return self.where(span.line, span.column + 1)
        return f"{printable(display_path(span.path))}:{span.line}:{span.column + 1}"

    def failed(self, cause: str, line: int = 1, column: int = 0, internal: bool = False) -> Checked:
        """This result as that of a file not analysed because of `cause` (one line), found at
        `line` and 0-based `column` of the analysed text; `internal`: a bug in GradGuard."""
        self.cause, self.at, self.internal = cause, (line, column), internal
        self.error = f"{self.where(line, column + 1)}: {cause}"
        return self

    def crashed(self, exc: BaseException) -> Checked:
        """This result as that of a file whose analysis hit a bug in GradGuard: `exc`, said in
        one line with where in GradGuard it was raised, for the user to report."""
        return self.failed(f"internal error in GradGuard: {_describe(exc)}", internal=True)


def failure(result: Checked) -> Finding | None:
    """The GG000 finding of a file not analysed (None for one that was): severity error, at the
    line where the analysis stopped, the cause as its message."""
    if result.error is None:
        return None
    line, column = result.at
    return Finding(NOT_ANALYSED, "not-analysed", "error", result.cause or result.error,
                   Span(line, column, line, column))


def printable(text: str) -> str:
    """`text` with line breaks and control characters escaped as Python escapes them (`\\n`,
    `\\x1b`): a file name cannot forge a line of the output, nor drive the terminal."""
    return _CONTROL.sub(lambda match: repr(match.group())[1:-1], text)


def display_path(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:  # another drive
        return path
    return path if rel.startswith(os.pardir) else rel


def check_source(text: str, path: str, config: Config, *, cells: Cells = (),
                 workspace: Workspace | None = None, reparser: Reparser | None = None) -> Checked:
    """Analyse `text` within `config.timeout` seconds and keep the findings `config` selects;
    imports of the project's own modules are followed (`workspace`, by default the one of
    the project `config` came from).  `reparser`: what an editor's process knows of the
    document's last text, to parse only what changed."""
    result = Checked(path, cells=cells)
    if not config.enabled:
        return result
    unreadable = _unparseable(text)
    if unreadable is not None:
        return result.failed(f"syntax error: source contains {unreadable[1]}", text.count("\n", 0, unreadable[0]) + 1)
    try:
        findings, result.facts = run(text, path=path, deadline=time.monotonic() + config.timeout,
                                     workspace=workspace_for(config, workspace), cells=cells, reparser=reparser)
        result.modules = tuple(dict.fromkeys([*(m.path for m in result.facts.modules), *result.facts.read])) \
            if result.facts is not None else ()
    except SyntaxError as exc:
        result.failed(f"syntax error: {_one_line(exc.msg)}", exc.lineno or 1, max(0, (exc.offset or 1) - 1))
    except TooComplex as exc:  # `line`: where the nesting is, if known
        result.failed(_one_line(str(exc)), exc.line or 1)
    except AnalysisTimeout as exc:  # `line`: of the statement running when the time ran out, if known
        spent = f"time budget of {config.timeout:g}s spent (setting 'timeout')"
        result.failed(f"not analysed past line {exc.line}: {spent}" if exc.line else f"not analysed: {spent}",
                      exc.line or 1)
    except Exception as exc:  # an engine bug must not take the other files down with it
        result.crashed(exc)
    else:
        noqa = Noqa(text) if findings else None
        result.findings = [finding.with_severity(config.severity.get(finding.code, finding.severity))
                           for finding in findings if config.selects(finding.code, path)
                           and (noqa is None or noqa.covering(finding) is None)]
    return result


def _unparseable(text: str) -> tuple[int, str] | None:
    """(index, what) of the first character no parser takes: a null byte (Python 3.10 and
    older raise ValueError for it, not SyntaxError), or a lone surrogate, which an editor's
    JSON can carry and no UTF-8 can (`ast.parse` raises UnicodeEncodeError)."""
    if "\0" in text:
        return text.index("\0"), "a null byte"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start, f"a lone surrogate (U+{ord(text[exc.start]):04X})"
    return None


def check_file(path: str | os.PathLike, config: Config, data: bytes | None = None) -> Checked:
    """Read (unless its bytes are given: `read_source`), decode and check one `.py` file (any
    other name is read as Python) or `.ipynb` notebook."""
    name = str(path)
    try:
        data = read_source(path) if data is None else data
    except NotReadable as exc:
        return Checked(name).failed(str(exc))
    if name.endswith(".ipynb"):
        try:
            text, cells = notebook_source(data)
        except (ValueError, TypeError, RecursionError) as exc:  # malformed JSON or cells
            return Checked(name).failed(f"not a Jupyter notebook: {_one_line(str(exc))}")
        return check_source(text, name, config, cells=cells)
    try:
        text = decode(data)
    except (SyntaxError, UnicodeDecodeError, LookupError) as exc:  # bad cookie, bytes or codec
        return Checked(name).failed(f"cannot decode: {_one_line(str(exc))}")
    return check_source(text, name, config)


class NotReadable(Exception):
    """Why the bytes of a file were not read; `str()` is the cause, one line."""


def read_source(path: str | os.PathLike) -> bytes:
    """The bytes of a regular file of at most `MAX_BYTES` (`MAX_NOTEBOOK_BYTES` for a notebook).

    Opened without blocking and checked on the open file (no race with a rename): a FIFO, a
    socket or a device (a `*.py` link to /dev/zero) is refused, never waited on or read forever.
    """
    limit = MAX_NOTEBOOK_BYTES if str(path).endswith(".ipynb") else MAX_BYTES
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
        with open(fd, "rb") as stream:
            status = os.fstat(fd)
            if not stat.S_ISREG(status.st_mode):
                raise NotReadable("not a regular file")
            if status.st_size > limit:
                raise NotReadable(f"file too large to analyse ({status.st_size / 2**20:.1f} MB; "
                                  f"the limit is {limit // 2**20} MB)")
            return stream.read(status.st_size)  # no more, should it grow meanwhile (a log being written)
    except OSError as exc:
        raise NotReadable(f"cannot read: {exc.strerror or exc}") from None


@functools.lru_cache(maxsize=8)
def _workspace(root: Path | None, python: str) -> Workspace:
    return Workspace(root, python=python)


def workspace_for(config: Config, workspace: Workspace | None = None) -> Workspace | None:
    """Where a check under `config` follows imports: nowhere with `follow-imports = false`;
    else `workspace` (the language server's, which has the open documents' texts), or the
    workspace of the project whose pyproject.toml `config` came from (imports then resolve
    from the project root too), else of the checked file's directory alone, one per root,
    interpreter and process, so a module imported by many files is parsed once.  Imports of
    the user's code outside the project resolve as `config.interpreter` finds them."""
    if not config.follow_imports:
        return None
    if workspace is not None:
        workspace.use(config.interpreter)
        return workspace
    return _workspace(config.source.parent if config.source else None, config.interpreter)


def iter_python_files(paths: Iterable[str | os.PathLike],
                      config: Config | Callable[[Path], Config] | None = None,
                      note: Callable[[str], None] | None = None) -> Iterator[Path]:
    """Each file to check once, in a stable order: given files as they are, directories walked.

    `config`: the settings, or a function giving those of a directory (`config.Configs`: each
    directory is walked with its own project's `exclude` and `respect-gitignore`).  A walk takes
    `*.py` and `*.ipynb` and passes over `SKIP_DIRS`, what matches an `exclude` pattern and
    what git ignores.  A path named in `paths` is always taken, unless `force-exclude` is set
    and a walk from its project (or git) root would have passed over it.

    Only regular files are taken, since reading anything else may block or never end: a FIFO,
    a socket, a device, and in a walk a broken symbolic link or one that leads out of the tree
    walked, are skipped with a `note` (one line, for stderr), as is a directory that cannot be
    read; the walk goes on.
    """
    note = note or (lambda text: None)
    if callable(config):
        config_for = config
    else:
        fixed = config or Config()

        def config_for(directory: Path) -> Config:
            return fixed
    ignores = Ignores()
    seen = set()
    for given in map(Path, paths):
        real = given.resolve()
        if _passed_over(real, given.is_dir(), config_for(real.parent), ignores, forced=True):
            continue
        if given.is_dir():
            found: Iterable[Path] = _walk(given, config_for, ignores, note)
        else:
            found = [given] if _regular(given, note) else []
        for path in found:
            if path not in seen:
                seen.add(path)
                yield path


def _walk(root: Path, config_for: Callable[[Path], Config], ignores: Ignores,
          note: Callable[[str], None]) -> Iterator[Path]:
    real_root = root.resolve()

    def unreadable(exc: OSError) -> None:
        note(f"skipped {printable(str(Path(exc.filename)))}: cannot read the directory: {exc.strerror or exc}")

    for directory, dirnames, filenames in os.walk(root, onerror=unreadable):
        real = real_root / os.path.relpath(directory, root)  # resolved once, at the root
        config = config_for(real)
        dirnames[:] = sorted(d for d in dirnames
                             if d not in SKIP_DIRS and not _passed_over(real / d, True, config, ignores))
        for filename in sorted(filenames):
            if Path(filename).suffix in SUFFIXES and not _passed_over(real / filename, False, config, ignores) \
                    and _regular(Path(directory, filename), note, real_root):
                yield Path(directory, filename)


def _regular(path: Path, note: Callable[[str], None], tree: Path | None = None) -> bool:
    """Whether `path` is a regular file (a symbolic link followed), and one inside `tree` (a
    resolved directory walked) if given; if not, a `note` says why it is skipped.  A named path
    (no `tree`) that cannot be looked at is taken: reading it says why, as GG000."""
    try:
        status = os.lstat(path)
        if stat.S_ISLNK(status.st_mode):
            if tree is not None and not Path(os.path.realpath(path)).is_relative_to(tree):
                note(f"skipped {printable(str(path))}: a symbolic link out of the tree walked")
                return False
            status = os.stat(path)
    except OSError as exc:
        if tree is None:
            return True
        note(f"skipped {printable(str(path))}: {exc.strerror or exc}")
        return False
    if not stat.S_ISREG(status.st_mode):
        note(f"skipped {printable(str(path))}: not a regular file")
    return stat.S_ISREG(status.st_mode)


def _passed_over(path: Path, is_dir: bool, config: Config, ignores: Ignores, forced: bool = False) -> bool:
    """Whether a walk skips `path` (absolute), an entry of a directory it is in; `forced`: a
    path named on the command line, skipped only with `force-exclude` (its directories decided too)."""
    if forced and not config.force_exclude:
        return False
    excluded = patterns(config.base, config.exclude) if config.exclude else None
    if excluded is not None and (excluded.covers(path, is_dir) if forced else excluded.decide(path, is_dir)):
        return True
    return config.respect_gitignore and (ignores.covers(path, is_dir) if forced else ignores.ignored(path, is_dir))


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _describe(exc: BaseException) -> str:
    """`Type: message (please report; at file.py:line)`, the line being where in GradGuard it was raised."""
    frames = traceback.extract_tb(exc.__traceback__)
    at = f"; at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
    return f"{type(exc).__name__}: {_one_line(str(exc))} (please report{at})"
