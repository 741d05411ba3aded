"""Notebooks in the editor: cells are analysed together, findings go back to their cell.

The client sends a notebook's cells as separate text documents; joined in order (as
`gradguard check` joins an .ipynb file), a tensor made in one cell and misused in another
is still followed.  Each finding and related location is mapped back to its cell's URI and
line; fixes are offered only when all their edits fall in the flagged cell.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from lsprotocol import types

from gradguard.api import Checked
from gradguard.findings import Finding, Span
from gradguard.lsp.convert import diagnostic, reported, to_range
from gradguard.notebook import join_cells
from gradguard.spans import split_lines


def joined(workspace, notebook: types.NotebookDocument) -> tuple[str, tuple, list[str]]:
    """The notebook's Python code cells as one module, where each cell starts in it, and
    the cell URIs by cell number."""
    uris, code = [], []
    for number, cell in enumerate(notebook.cells, 1):
        uris.append(cell.document)
        if cell.kind == types.NotebookCellKind.Code:
            doc = workspace.get_text_document(cell.document)
            if doc.language_id in (None, "python"):
                code.append((number, doc.source))
    text, starts = join_cells(code)
    return text, starts, uris


def diagnostics(workspace, checked: Checked, uris: list[str],
                more: Iterable[Finding] = ()) -> dict[str, list[types.Diagnostic]]:
    """Diagnostics per cell URI (every cell gets a list, so cleared cells are cleared): the
    findings, GG000 if the notebook was not analysed, and `more` (findings of the joined text)."""
    out: dict[str, list[types.Diagnostic]] = {uri: [] for uri in uris}

    def related_at(span: Span) -> types.Location:
        """In the cell it is in, which may be another than the finding's."""
        cell, local = _in_cell(checked, span)
        doc = workspace.get_text_document(uris[cell - 1])
        return types.Location(uri=doc.uri, range=to_range(doc.position_codec, split_lines(doc.source), local))

    for finding in (*reported(checked), *more):
        cell, _ = checked.locate(finding.span.line)
        if cell is None or cell > len(uris):
            continue
        uri = uris[cell - 1]
        fixes = tuple(f for f in finding.fixes
                      if all(checked.locate(e.span.line)[0] == cell and
                             (e.target is None or checked.locate(e.target.line)[0] == cell) for e in f.edits))
        doc = workspace.get_text_document(uri)
        lines = split_lines(doc.source)
        out[uri].append(diagnostic(replace(finding, fixes=fixes), uri, doc.version, doc.position_codec, lines,
                                   lambda span: _in_cell(checked, span)[1], related_at))
    return out


def _in_cell(checked: Checked, span: Span) -> tuple[int, Span]:
    """The cell a span of the joined module is in, and the span in that cell's lines."""
    cell, line = checked.locate(span.line)
    return cell, Span(line, span.column, line + span.end_line - span.line, span.end_column)
