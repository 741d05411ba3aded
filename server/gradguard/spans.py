"""AST positions to `Span`s: `ast` counts columns in UTF-8 bytes, findings count characters."""
from __future__ import annotations

import ast

from gradguard.findings import Span


class Positions:
    def __init__(self, source: str):
        self.lines = source.splitlines()

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
