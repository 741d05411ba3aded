"""Notebooks in the editor: cells are analysed together, findings go back to their cell.

The client sends a notebook's cells as separate text documents; joined in order (as
`gradguard check` joins an .ipynb file), a tensor made in one cell and misused in another
is still followed.  Each finding and related location is mapped back to its cell's URI and
line; fixes are offered only when all their edits fall in the flagged cell.
"""
from __future__ import annotations

from dataclasses import replace

from lsprotocol import types

from gradguard.api import Checked, join_cells
from gradguard.findings import Related, Span
from gradguard.lsp.convert import diagnostic


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


def diagnostics(workspace, checked: Checked, uris: list[str]) -> dict[str, list[types.Diagnostic]]:
    """Diagnostics per cell URI (every cell gets a list, so cleared cells are cleared)."""
    out: dict[str, list[types.Diagnostic]] = {uri: [] for uri in uris}
    for finding in checked.findings:
        cell, _ = checked.locate(finding.span.line)
        if cell is None or cell > len(uris):
            continue
        uri = uris[cell - 1]

        def local(span: Span, cell=cell) -> Span:
            c, line = checked.locate(span.line)
            if c != cell:
                return span
            return Span(line, span.column, line + span.end_line - span.line, span.end_column)

        related = tuple(r for r in finding.related if checked.locate(r.span.line)[0] == cell)
        fixes = tuple(f for f in finding.fixes
                      if all(checked.locate(e.span.line)[0] == cell and
                             (e.target is None or checked.locate(e.target.line)[0] == cell) for e in f.edits))
        doc = workspace.get_text_document(uri)
        lines = doc.source.splitlines(keepends=True)
        finding = replace(finding, related=tuple(Related(r.span, r.message) for r in related), fixes=fixes)
        out[uri].append(diagnostic(finding, uri, doc.version, doc.position_codec, lines, local))
    return out
