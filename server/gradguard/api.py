"""Checking a source text or a file: the engine's findings with the settings and noqa applied.

This is the one place that turns whatever can go wrong with one file (bytes that do not
decode, a syntax error, a notebook that is not JSON, an analysis that runs out of time, a bug
in the engine) into a one-line `FileResult.error`, so the command line and the language
server never crash on a file and never print a traceback.

Notebooks (`.ipynb`) are analysed as one module: their code cells joined in order, so a
value made in one cell and misused in a later one is still seen.  Each finding's lines are
mapped back to a cell; the cell number counts every cell of the notebook from 1, markdown
cells included, as a person counts them on screen.
"""
from __future__ import annotations

import fnmatch
import functools
import io
import json
import os
import time
import tokenize
import traceback
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from gradguard.analysis import AnalysisTimeout, run
from gradguard.config import Config
from gradguard.facts import Facts
from gradguard.findings import FileResult
from gradguard.suppress import is_suppressed, noqa_map
from gradguard.workspace import Workspace

SUFFIXES = (".py", ".ipynb")
# Directories a walk passes over; one named on the command line is still checked.
SKIP_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__", ".venv", "venv", ".tox", ".nox",
                       ".mypy_cache", ".pytest_cache", "node_modules", "site-packages",
                       ".ipynb_checkpoints", ".gradguard_cache", ".ruff_cache"})
# Cell magics whose body is Python: the body is checked, the magic line is not.
PYTHON_CELL_MAGICS = ("%%time", "%%timeit", "%%capture")


@dataclass
class Checked(FileResult):
    """A `FileResult` plus what is needed to show it: the kind of error, the notebook cells."""

    internal: bool = False  # `error` is a bug in GradGuard, not a problem of the file
    cells: tuple[tuple[int, int], ...] = ()  # notebook: (first line in the joined text, cell number)
    facts: Facts | None = None  # what the findings rest on (the language server's hover reads it)
    modules: tuple[str, ...] = ()  # paths of the workspace modules the analysis read (its imports)

    def locate(self, line: int) -> tuple[int | None, int]:
        """(cell number, line in the cell) of a line of the analysed text; no cell for a .py file."""
        for start, cell in reversed(self.cells):
            if line >= start:
                return cell, line - start + 1
        return None, line

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


def check_source(text: str, path: str, config: Config, *, cells: tuple[tuple[int, int], ...] = (),
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
                                     workspace=workspace_for(config, workspace))
        result.modules = tuple(m.path for m in result.facts.modules) if result.facts is not None else ()
    except SyntaxError as exc:
        result.error = f"{result.where(exc.lineno or 1, exc.offset or 1)}: syntax error: {_one_line(exc.msg)}"
    except AnalysisTimeout:
        result.error = f"{path}: analysis took longer than {config.timeout:g}s and was stopped (setting 'timeout')"
    except Exception as exc:  # an engine bug must not take the other files down with it
        result.error = f"{path}: internal error: {_describe(exc)}"
        result.internal = True
    else:
        noqa = noqa_map(text) if findings else {}
        result.findings = [finding.with_severity(config.severity.get(finding.code, finding.severity))
                           for finding in findings
                           if config.selects(finding.code) and not is_suppressed(finding, noqa)]
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
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data.decode(encoding)


def notebook_source(data: bytes) -> tuple[str, tuple[tuple[int, int], ...]]:
    """The code cells of a notebook as one module, and where each cell starts in it.

    IPython lines (`%magic`, `!shell`) become `pass` at the same indentation so line numbers
    and blocks stay intact; a cell run by a non-Python cell magic (`%%bash`) is left out, and
    so is every cell of a notebook whose kernel is not Python.  Raises ValueError (or
    TypeError, for cells of the wrong type) when the bytes are not a notebook.
    """
    notebook = json.loads(data)
    cells = _get(notebook, "cells")
    if not isinstance(cells, list):
        raise ValueError("no list of cells")
    language = _get(notebook, "metadata", "kernelspec", "language") or \
        _get(notebook, "metadata", "language_info", "name") or "python"
    if str(language).lower() != "python":
        return "", ()
    code = []
    for number, cell in enumerate(cells, 1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        code.append((number, "".join(source) if isinstance(source, list) else str(source)))
    return join_cells(code)


def join_cells(cells: Iterable[tuple[int, str]]) -> tuple[str, tuple[tuple[int, int], ...]]:
    """Code cells `(number, text)` as one module, and where each cell starts in it (the
    language server joins the cells an editor sends the same way)."""
    lines: list[str] = []
    starts = []
    for number, text in cells:
        cell_lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        if cell_lines[-1] == "":
            cell_lines.pop()
        if cell_lines and cell_lines[0].startswith("%%") and not cell_lines[0].startswith(PYTHON_CELL_MAGICS):
            continue
        if cell_lines:
            starts.append((len(lines) + 1, number))
            lines.extend(_without_magic(line) if starts_line else line
                         for line, starts_line in zip(cell_lines, _logical_line_starts(cell_lines)))
    return "".join(line + "\n" for line in lines), tuple(starts)


def iter_python_files(paths: Iterable[str | os.PathLike], config: Config | None = None) -> Iterator[Path]:
    """Each file to check once, in a stable order: given files as they are, directories walked.

    A walk takes `*.py` and `*.ipynb`, and passes over `SKIP_DIRS` and whatever matches a
    `config.exclude` pattern (by name, or by path relative to the pyproject.toml's directory).
    """
    config = config or Config()
    seen = set()
    for given in map(Path, paths):
        for path in _walk(given, config) if given.is_dir() else [given]:
            if path not in seen:
                seen.add(path)
                yield path


def _walk(root: Path, config: Config) -> Iterator[Path]:
    for directory, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames
                             if d not in SKIP_DIRS and not _excluded(Path(directory, d), config))
        for filename in sorted(filenames):
            path = Path(directory, filename)
            if path.suffix in SUFFIXES and not _excluded(path, config):
                yield path


def _excluded(path: Path, config: Config) -> bool:
    if not config.exclude:
        return False
    names = [path.name]
    if config.source is not None:
        try:
            names.append(path.resolve().relative_to(config.source.parent).as_posix())
        except ValueError:  # outside the project: only the name can match
            pass
    return any(fnmatch.fnmatch(name, pattern) for name in names for pattern in config.exclude)


def _get(document, *keys):
    """`document[k1][k2]...`, or None where a level is missing or not a JSON object."""
    for key in keys:
        document = document.get(key) if isinstance(document, dict) else None
    return document


def _logical_line_starts(lines: list[str]) -> Iterator[bool]:
    """For each line, whether it starts a logical line: not inside brackets, a string or a
    backslash continuation.  Only such a line can be an IPython magic: the `%(epoch, loss)`
    continuing `print("..."` on the line above is Python's `%` operator."""
    depth, quote, continued = 0, "", False
    for line in lines:
        yield depth == 0 and not quote and not continued
        if line.lstrip().startswith(("%", "!")) and depth == 0 and not quote and not continued:
            continue  # a magic: not Python, it opens nothing
        i, n = 0, len(line)
        while i < n:
            c = line[i]
            if quote:
                if c == "\\":
                    i += 1
                elif line.startswith(quote, i):
                    i += len(quote) - 1
                    quote = ""
            elif c == "#":
                break
            elif c in "\"'":
                quote = c * 3 if line.startswith(c * 3, i) else c
                i += len(quote) - 1
            elif c in "([{":
                depth += 1
            elif c in ")]}":
                depth = max(depth - 1, 0)
            i += 1
        continued = line.endswith("\\") and not quote
        if len(quote) == 1:  # a one-quote string cannot span lines (unless continued)
            quote = quote if continued else ""


def _without_magic(line: str) -> str:
    stripped = line.lstrip()
    return line[:len(line) - len(stripped)] + "pass" if stripped.startswith(("%", "!")) else line


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _describe(exc: BaseException) -> str:
    """`Type: message (at file.py:line)`, the line being where in GradGuard it was raised."""
    frames = traceback.extract_tb(exc.__traceback__)
    at = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {_one_line(str(exc))}{at}"
