"""Shared pieces of the end-to-end language-server tests: the real server over stdio, and
applying a WorkspaceEdit to text the way an editor does."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from lsprotocol import types
from pytest_lsp import ClientServerConfig

from gradguard.spans import split_lines

REPO = Path(__file__).resolve().parents[1]
SERVER = ClientServerConfig(
    server_command=[sys.executable, "-m", "gradguard", "lsp"],
    server_env={**os.environ, "PYTHONPATH": str(REPO / "server") + os.pathsep + os.environ.get("PYTHONPATH", "")},
)


def utf16_offset(line: str, character: int) -> int:
    """A UTF-16 column in `line` as a Python string index."""
    units = 0
    for index, ch in enumerate(line):
        if units >= character:
            return index
        units += 2 if ord(ch) > 0xFFFF else 1
    return len(line)


def apply_edits(text: str, edits: list[types.TextEdit]) -> str:
    """Apply non-overlapping TextEdits (UTF-16 positions), last first, as an editor does
    (lines end at \n, \r\n and \r only, as LSP says)."""
    lines = split_lines(text)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(pos: types.Position) -> int:
        if pos.line >= len(lines):
            return len(text)
        return starts[pos.line] + utf16_offset(lines[pos.line], pos.character)

    for edit in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        a, b = offset(edit.range.start), offset(edit.range.end)
        text = text[:a] + edit.new_text + text[b:]
    return text


def workspace_edits(edit: types.WorkspaceEdit, uri: str) -> list[types.TextEdit]:
    out = []
    for change in edit.document_changes or []:
        if isinstance(change, types.TextDocumentEdit) and change.text_document.uri == uri:
            out.extend(change.edits)
    out.extend((edit.changes or {}).get(uri, []))
    return out
