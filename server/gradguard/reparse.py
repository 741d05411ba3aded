"""Parsing again only what an edit changed: the top-level statements whose lines it touched.

A document being typed in is parsed once per keystroke, and `ast.parse` of a 2,000-line
script takes a sixth of its analysis.  An edit changes a few lines; the top-level statements
wholly before them and wholly after them are the same text, so they are the same trees
(moved down or up by the lines the edit added or removed).  `Reparser.parse` keeps each
document's last text and tree, parses the lines between the statements it keeps as one
piece, and joins the three.  That piece parses alone exactly when it is whole statements:
what could join it to its neighbours (a bracket or a string left open, a `\\` at its end, a
decorator with nothing under it, an `else:` that belongs to the statement before) makes it
fail alone, and then the whole text is parsed, which also gives a syntax error its usual
place and message.  A statement kept is only one that starts and ends on lines of its own
(not `a = 1; b = 2` across the edit).

The result is the tree `ast.parse` gives for the whole text, node for node, with its
positions and stable ids (`ids.number`); the nested scopes of the statements kept keep
their ids when their qualified names do, so only the module's own scope and the new
statements are numbered again.
"""
from __future__ import annotations

import ast
import warnings
from collections import OrderedDict

from gradguard.ids import number
from gradguard.spans import split_lines


class Reparser:
    """The last text and tree of each of the few documents a process analyses again and again."""

    def __init__(self, documents: int = 4):
        self.documents = documents
        self._last: OrderedDict[str, tuple[list[str], ast.Module]] = OrderedDict()

    def parse(self, source: str, path: str, full) -> ast.Module:
        """`source`'s numbered tree; `full(source)` parses a whole text (and raises its
        SyntaxError), for a document seen for the first time or an edit that joins statements."""
        lines = split_lines(source)
        last = self._last.get(path)  # the last text that parsed: a syntax error keeps it
        tree = _spliced(last, lines) if last is not None else None
        if tree is None:
            tree = number(full(source), "")
        self._last.pop(path, None)
        self._last[path] = (lines, tree)
        while len(self._last) > self.documents:
            self._last.popitem(last=False)
        return tree

    def keep_only(self, paths) -> None:
        """Forget the documents not among `paths` (the editor closed them)."""
        for path in [p for p in self._last if p not in paths]:
            del self._last[path]


def _spliced(last: tuple[list[str], ast.Module], lines: list[str]) -> ast.Module | None:
    """The tree of `lines` made from the previous tree's statements before and after the lines
    that changed and a parse of what is between; None if that part does not parse alone."""
    old_lines, old = last
    if old_lines == lines:
        return old
    same_start = 0
    limit = min(len(lines), len(old_lines))
    while same_start < limit and lines[same_start] == old_lines[same_start]:
        same_start += 1
    same_end = 0
    while same_end < limit - same_start and lines[-1 - same_end] == old_lines[-1 - same_end]:
        same_end += 1
    body = old.body
    spans = [(_first_line(s), s.end_lineno) for s in body]
    # statements kept before the edit: ending on an unchanged line, no other starting on it
    head = 0
    while head < len(body) and spans[head][1] <= same_start and \
            (head + 1 == len(body) or spans[head + 1][0] > spans[head][1]):
        head += 1
    # statements kept after it: starting on an unchanged line (one that starts after a `;` ending
    # a statement of several lines leaves that one's first lines to the piece, which does not parse
    # alone: they end in an open bracket, string or `\`)
    first_kept = len(old_lines) - same_end + 1  # the first unchanged line at the end, in old numbering
    tail = len(body)
    while tail > head and spans[tail - 1][0] >= first_kept:
        tail -= 1
    shift = len(lines) - len(old_lines)
    start = spans[head - 1][1] if head else 0  # lines before the piece (0-based index of its first)
    stop = spans[tail][0] - 1 + shift if tail < len(body) else len(lines)  # its end, in new numbering
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # as `analysis.parse`: not ours to report
            piece = ast.parse("".join(lines[start:stop]))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if start:
        ast.increment_lineno(piece, start)
    kept_after = body[tail:]
    if shift:
        for stmt in kept_after:
            ast.increment_lineno(stmt, shift)
    return number(ast.Module(body=[*body[:head], *piece.body, *kept_after], type_ignores=[]), "")


def _first_line(stmt: ast.stmt) -> int:
    """Where a statement's text starts: its first decorator's line for a decorated definition."""
    decorators = getattr(stmt, "decorator_list", None)
    return min([stmt.lineno, *(d.lineno for d in decorators)]) if decorators else stmt.lineno
