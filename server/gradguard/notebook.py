"""A notebook as the analysis reads it: its code cells as one Python module, and the map
from that module's lines back to the cells.

Cells are joined in notebook order, the order a kernel runs them top to bottom, so a value
made in one cell and misused in a later one is still seen (a kernel that ran cells out of
order, or ran one twice, is not modelled).  IPython syntax (`files = !ls`, `%timeit -o f()`,
`obj?`, `%matplotlib inline`, a `%%time` cell) becomes Python *line for line*: every cell
keeps its number of lines, and every line that is plain Python keeps its text, so findings,
columns and noqa comments stay where the user wrote them.  IPython's own input transformer
does this when IPython is installed (imported on the first notebook, not before: the
language server must start fast); otherwise, or for a cell it would shorten (a `\\`
continued magic), each IPython line is masked: replaced by `pass`, or by
`target = __ipython__()` when it assigns, an unknown value to the analysis, never a tensor.

The cell number counts every cell of the notebook from 1, markdown cells included, as a
person counts them on screen.
"""
from __future__ import annotations

import ast
import functools
import json
import re
from collections.abc import Iterable

from gradguard.spans import LINE_BREAK

Cells = tuple[tuple[int, int], ...]  # (first line in the joined module, cell number), in order

# Cell magics that run their body as Python in the kernel's namespace (`%%time`, `%%capture`,
# ...): the body is checked, the magic line is not.  Any other (`%%bash`, `%%html`,
# `%%writefile`, `%%python`, which runs in another process) leaves its cell out.
PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug"})
# What a masked IPython line that assigns gets: a call of a name nothing defines.
PLACEHOLDER = "__ipython__()"
# The first character of a logical line that makes it IPython's, never Python's: a magic,
# a shell command, help (`?obj`), autocall (`/f a`, `,f a b`, `;f a b`).
ESCAPES = ("%", "!", "?", "/", ",", ";")
# `target = !cmd` / `target = %magic args`: the target is checked to be one (see `_mask`).
ASSIGNED = re.compile(r"\s*([^=#]*[^=#!<>:+\-*/%&|^@~\s])\s*=\s*[!%]")


def notebook_source(data: bytes, *, ipython: bool = True) -> tuple[str, Cells]:
    """The code cells of a notebook as one module, and where each cell starts in it.

    Every cell of a notebook whose kernel is not Python is left out.  `ipython=False`
    masks IPython syntax even when IPython is installed.  Raises ValueError (or TypeError,
    for cells of the wrong type) when the bytes are not a notebook.
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
    return join_cells(code, ipython=ipython)


def join_cells(cells: Iterable[tuple[int, str]], *, ipython: bool = True) -> tuple[str, Cells]:
    """Code cells `(number, text)`, in notebook order, as one module, and where each cell
    starts in it (the language server joins the cells an editor sends the same way)."""
    lines: list[str] = []
    starts = []
    for number, text in cells:
        cell_lines = LINE_BREAK.split(text)
        if cell_lines[-1] == "":
            cell_lines.pop()
        python = _python(cell_lines, ipython)
        if python:
            starts.append((len(lines) + 1, number))
            lines.extend(python)
    return "".join(line + "\n" for line in lines), tuple(starts)


def locate(cells: Cells, line: int) -> tuple[int | None, int]:
    """(cell number, line in the cell) of a line of the joined module; no cell without `cells`."""
    for start, cell in reversed(cells):
        if line >= start:
            return cell, line - start + 1
    return None, line


def line_label(cells: Cells, line: int) -> str:
    """A line of the analysed text as a message names it: "line 12", or "line 2 of cell 3"."""
    cell, line = locate(cells, line)
    return f"line {line}" if cell is None else f"line {line} of cell {cell}"


def _python(lines: list[str], ipython: bool) -> list[str] | None:
    """A cell's lines as Python, as many as it has; None for a cell not run as Python."""
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is not None and lines[first].startswith("%%"):
        name = lines[first][2:].split(maxsplit=1)
        if not name or name[0] not in PYTHON_CELL_MAGICS:
            return None
        body = _python(lines[first + 1:], ipython)  # itself a cell: `%%time` then `%%capture`
        return None if body is None else [*lines[:first], "pass", *body]
    if ipython and lines:
        transformed = _transformed(lines)
        if transformed is not None:
            return transformed
    return _masked(lines)


def _transformed(lines: list[str]) -> list[str] | None:
    """IPython's transformation of a cell, None without IPython or when it changed the
    number of lines."""
    manager = _transformer()
    if manager is None:
        return None
    try:
        out = LINE_BREAK.split(manager.transform_cell("".join(line + "\n" for line in lines)))
    except Exception:  # IPython's tokenizing of whatever a cell holds: masking does without it
        return None
    if out[-1] == "":
        out.pop()
    return out if len(out) == len(lines) else None


@functools.cache
def _transformer():
    """IPython's input transformer, imported once; None when IPython is not installed.

    Its clean-ups that drop a cell's leading blank lines or its common indentation are
    left out: they would move every finding of the cell."""
    try:
        from IPython.core import inputtransformer2 as it
    except Exception:  # not installed, or an installation that does not import
        return None
    manager = it.TransformerManager()
    manager.cleanup_transforms = [t for t in manager.cleanup_transforms
                                  if t not in (it.leading_empty_lines, it.leading_indent)]
    return manager


def _masked(lines: list[str]) -> list[str]:
    """A cell's lines with each IPython line replaced by Python of the same place.

    An IPython line starts a logical line: the `%(epoch, loss))` continuing `print("..."`
    on the line above is Python's `%` operator, and a `%` in a string is text.  So the lines
    are scanned for brackets, strings and backslash continuations; a masked line opens
    nothing, and the lines its `\\` continues are blanked."""
    out = []
    depth, quote, continued, escaped = 0, "", False, False
    for line in lines:
        if escaped:  # the rest of a `\` continued magic or shell command
            out.append("")
            escaped = line.endswith("\\")
            continue
        new_depth, new_quote, last = _scan(line, depth, quote)
        starts = depth == 0 and not quote and not continued
        mask = _mask(line, last == "?" and not new_depth and not new_quote) if starts else None
        if mask is not None:
            out.append(mask)
            escaped = line.endswith("\\")
            continue
        out.append(line)
        depth, quote = new_depth, new_quote
        if len(quote) == 1 and not line.endswith("\\"):  # a one-quote string ends with its line
            quote = ""
        continued = line.endswith("\\") and not quote
    return out


def _mask(line: str, asks_help: bool) -> str | None:
    """The Python that stands for `line`, which starts a logical line, if it is IPython's;
    `asks_help`: it ends with `?` (`obj?`, `obj??`), which no Python line does."""
    stripped = line.lstrip()
    indent = line[:len(line) - len(stripped)]
    assigned = ASSIGNED.match(line)
    if assigned and _is_target(assigned.group(1)):
        return f"{indent}{assigned.group(1)} = {PLACEHOLDER}"
    if stripped.startswith(ESCAPES) or asks_help:
        return indent + "pass"
    return None


def _scan(line: str, depth: int, quote: str) -> tuple[int, str, str]:
    """The bracket depth and the open string's quote after `line`, and the last character
    of code in it (not in a string or a comment)."""
    last = ""
    i, n = 0, len(line)
    while i < n:
        c = line[i]
        if quote:
            if c == "\\":
                i += 1
            elif line.startswith(quote, i):
                i += len(quote) - 1
                quote, last = "", c
        elif c == "#":
            break
        elif c in "\"'":
            quote = c * 3 if line.startswith(c * 3, i) else c
            i += len(quote) - 1
        else:
            if c in "([{":
                depth += 1
            elif c in ")]}":
                depth = max(depth - 1, 0)
            if not c.isspace():
                last = c
        i += 1
    return depth, quote, last


def _is_target(text: str) -> bool:
    """Whether `text` can stand left of `=` (`files`, `a, b`, `d[k]`)."""
    try:
        body = ast.parse(f"{text} = 0").body
    except SyntaxError:
        return False
    return len(body) == 1 and isinstance(body[0], ast.Assign)


def _get(document, *keys):
    """`document[k1][k2]...`, or None where a level is missing or not a JSON object."""
    for key in keys:
        document = document.get(key) if isinstance(document, dict) else None
    return document
