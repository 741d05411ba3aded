"""AST positions to `Span`s: `ast` counts columns in UTF-8 bytes, findings count characters."""
from __future__ import annotations

import ast
import re

from gradguard.findings import Span


# Where Python's tokenizer and the Language Server Protocol end a line.  str.splitlines()
# also breaks at \f, \v, \x1c-\x1e, \x85, \u2028 and \u2029: a form feed in a comment would
# shift every line after it.
LINE_BREAK = re.compile(r"\r\n|\r|\n")


def split_lines(text: str) -> list[str]:
    """`text`'s lines with their line breaks (`LINE_BREAK` only); no empty last line."""
    out, pos = [], 0
    for m in LINE_BREAK.finditer(text):
        out.append(text[pos:m.end()])
        pos = m.end()
    if pos < len(text):
        out.append(text[pos:])
    return out


class Positions:
    def __init__(self, source: str):
        self.lines = LINE_BREAK.split(source)

    def column(self, line: int, byte_col: int) -> int:
        if not 0 < line <= len(self.lines):
            return byte_col
        text = self.lines[line - 1]
        if text.isascii():
            return byte_col
        return len(text.encode("utf-8")[:byte_col].decode("utf-8", "replace"))

    def span(self, node: ast.AST) -> Span:
        line, end = node.lineno, getattr(node, "end_lineno", None) or node.lineno
        end_col = getattr(node, "end_col_offset", None)
        if end_col is None:
            end_col = len(self.lines[end - 1].encode("utf-8")) if 0 < end <= len(self.lines) else node.col_offset
        return Span(line, self.column(line, node.col_offset), end, self.column(end, end_col))

    def segment(self, node: ast.AST) -> str:
        """The node's source text (like `ast.get_source_segment`, without re-splitting the file)."""
        sp = self.span(node)
        if not 0 < sp.line <= sp.end_line <= len(self.lines):
            return ""
        if sp.line == sp.end_line:
            return self.lines[sp.line - 1][sp.column:sp.end_column]
        parts = [self.lines[sp.line - 1][sp.column:], *self.lines[sp.line:sp.end_line - 1],
                 self.lines[sp.end_line - 1][:sp.end_column]]
        return "\n".join(parts)
