"""Checking a source text or a file: the engine's findings with the settings and noqa applied.

This is the one place that turns whatever can go wrong with one file (bytes that do not
decode, a syntax error, a notebook that is not JSON, an analysis that runs out of time, a bug
in the engine) into a one-line `FileResult.error`, so the command line and the language
server never crash on a file and never print a traceback.

Notebooks (`.ipynb`) are analysed as one module, their code cells joined in order (see
`gradguard.notebook`); each finding's lines are mapped back to a cell.
"""
from __future__ import annotations

import functools
import io
import os
import time
import tokenize
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from gradguard.analysis import AnalysisTimeout, run
from gradguard.config import Config
from gradguard.facts import Facts
from gradguard.findings import FileResult
from gradguard.ignore import Ignores, patterns
from gradguard.notebook import Cells, locate, notebook_source
from gradguard.suppress import Noqa
from gradguard.workspace import Workspace

SUFFIXES = (".py", ".ipynb")
# Directories a walk passes over; one named on the command line is still checked.
SKIP_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__", ".venv", "venv", ".tox", ".nox",
                       ".mypy_cache", ".pytest_cache", "node_modules", "site-packages",
                       ".ipynb_checkpoints", ".gradguard_cache", ".ruff_cache"})


@dataclass
class Checked(FileResult):
    """A `FileResult` plus what is needed to show it: the kind of error, the notebook cells."""

    internal: bool = False  # `error` is a bug in GradGuard, not a problem of the file
    cells: Cells = ()  # notebook: (first line in the joined text, cell number)
    facts: Facts | None = None  # what the findings rest on (the language server's hover reads it)
    modules: tuple[str, ...] = ()  # paths of the workspace modules the analysis read (its imports)

    def locate(self, line: int) -> tuple[int | None, int]:
        """(cell number, line in the cell) of a line of the analysed text; no cell for a .py file."""
        return locate(self.cells, line)

    def where(self, line: int, column: int) -> str:
        """`path:line:column` (both as given), or `path:cell N:line:column` in a notebook."""
        cell, line = self.locate(line)
        return f"{self.path}:{line}:{column}" if cell is None else f"{self.path}:cell {cell}:{line}:{column}"

    def where_span(self, span) -> str:
        """`where` for a span of this file, or `module.py:line:column` in an imported module
        (its path relative to the working directory when it is below it)."""
        if span.path is None:
            return self.where(span.line, span.column + 1)
        return f"{display_path(span.path)}:{span.line}:{span.column + 1}"


def display_path(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:  # another drive
        return path
    return path if rel.startswith(os.pardir) else rel


def check_source(text: str, path: str, config: Config, *, cells: Cells = (),
                 workspace: Workspace | None = None) -> Checked:
    """Analyse `text` within `config.timeout` seconds and keep the findings `config` selects;
    imports of the project's own modules are followed (`workspace`, by default the one of
    the project `config` came from)."""
    result = Checked(path, cells=cells)
    if not config.enabled:
        return result
    if "\0" in text:  # Python 3.10 and older raise ValueError, not SyntaxError, for this
        result.error = f"{path}: syntax error: source contains a null byte"
        return result
    try:
        findings, result.facts = run(text, path=path, deadline=time.monotonic() + config.timeout,
                                     workspace=workspace_for(config, workspace), cells=cells)
        result.modules = tuple(m.path for m in result.facts.modules) if result.facts is not None else ()
    except SyntaxError as exc:
        result.error = f"{result.where(exc.lineno or 1, exc.offset or 1)}: syntax error: {_one_line(exc.msg)}"
    except AnalysisTimeout:
        result.error = f"{path}: analysis took longer than {config.timeout:g}s and was stopped (setting 'timeout')"
    except Exception as exc:  # an engine bug must not take the other files down with it
        result.error = f"{path}: internal error: {_describe(exc)}"
        result.internal = True
    else:
        noqa = Noqa(text) if findings else None
        result.findings = [finding.with_severity(config.severity.get(finding.code, finding.severity))
                           for finding in findings if config.selects(finding.code, path)
                           and (noqa is None or noqa.covering(finding) is None)]
    return result


def check_file(path: str | os.PathLike, config: Config, data: bytes | None = None) -> Checked:
    """Read (unless its bytes are given), decode and check one `.py` file (any other name is
    read as Python) or `.ipynb` notebook."""
    name = str(path)
    try:
        data = Path(path).read_bytes() if data is None else data
    except OSError as exc:
        return Checked(name, error=f"{name}: cannot read: {exc.strerror or exc}")
    if name.endswith(".ipynb"):
        try:
            text, cells = notebook_source(data)
        except (ValueError, TypeError, RecursionError) as exc:  # malformed JSON or cells
            return Checked(name, error=f"{name}: not a Jupyter notebook: {_one_line(str(exc))}")
        return check_source(text, name, config, cells=cells)
    try:
        text = decode(data)
    except (SyntaxError, UnicodeDecodeError, LookupError) as exc:  # bad cookie, bytes or codec
        return Checked(name, error=f"{name}: cannot decode: {_one_line(str(exc))}")
    return check_source(text, name, config)


@functools.lru_cache(maxsize=8)
def _workspace(root: Path | None) -> Workspace:
    return Workspace(root)


def workspace_for(config: Config, workspace: Workspace | None = None) -> Workspace | None:
    """Where a check under `config` follows imports: nowhere with `follow-imports = false`;
    else `workspace` (the language server's, which has the open documents' texts), or the
    workspace of the project whose pyproject.toml `config` came from (imports then resolve
    from the project root too), else of the checked file's directory alone, one per root and
    process, so a module imported by many files is parsed once."""
    if not config.follow_imports:
        return None
    return workspace if workspace is not None else _workspace(config.source.parent if config.source else None)


def decode(data: bytes) -> str:
    """Source bytes as text, the way Python reads them: PEP 263 coding cookie, BOM, else UTF-8."""
    return data.decode(_encoding(data))


def encode(text: str, like: bytes) -> bytes:
    """`text` in the encoding the source bytes `like` are in (a file written back after an edit)."""
    return text.encode(_encoding(like))


def _encoding(data: bytes) -> str:
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return encoding


def iter_python_files(paths: Iterable[str | os.PathLike],
                      config: Config | Callable[[Path], Config] | None = None) -> Iterator[Path]:
    """Each file to check once, in a stable order: given files as they are, directories walked.

    `config`: the settings, or a function giving those of a directory (`config.Configs`: each
    directory is walked with its own project's `exclude` and `respect-gitignore`).  A walk takes
    `*.py` and `*.ipynb` and passes over `SKIP_DIRS`, what matches an `exclude` pattern and
    what git ignores.  A path named in `paths` is always taken, unless `force-exclude` is set
    and a walk from its project (or git) root would have passed over it.
    """
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
        for path in _walk(given, config_for, ignores) if given.is_dir() else [given]:
            if path not in seen:
                seen.add(path)
                yield path


def _walk(root: Path, config_for: Callable[[Path], Config], ignores: Ignores) -> Iterator[Path]:
    real_root = root.resolve()
    for directory, dirnames, filenames in os.walk(root):
        real = real_root / os.path.relpath(directory, root)  # resolved once, at the root
        config = config_for(real)
        dirnames[:] = sorted(d for d in dirnames
                             if d not in SKIP_DIRS and not _passed_over(real / d, True, config, ignores))
        for filename in sorted(filenames):
            if Path(filename).suffix in SUFFIXES and not _passed_over(real / filename, False, config, ignores):
                yield Path(directory, filename)


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
    """`Type: message (at file.py:line)`, the line being where in GradGuard it was raised."""
    frames = traceback.extract_tb(exc.__traceback__)
    at = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {_one_line(str(exc))}{at}"
