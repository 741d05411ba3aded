"""Findings to LSP types and back: ranges in the client's position encoding, severities,
and the JSON a diagnostic carries in `data` so code actions need no second analysis."""
from __future__ import annotations

from lsprotocol import types
from pygls.uris import from_fs_path
from pygls.workspace.position_codec import PositionCodec, ServerTextPosition, ServerTextRange

from gradguard.api import Checked, failure
from gradguard.findings import Edit, Finding, Fix, Span
from gradguard.rules import rule_by_code
from gradguard.spans import split_lines

SEVERITY = {"error": types.DiagnosticSeverity.Error, "warning": types.DiagnosticSeverity.Warning,
            "info": types.DiagnosticSeverity.Information, "hint": types.DiagnosticSeverity.Hint}


def to_range(codec: PositionCodec, lines: list[str], span: Span) -> types.Range:
    """A span (1-based lines, character columns) as a range in the client's units (UTF-16 by default)."""
    server = ServerTextRange(ServerTextPosition(span.line - 1, span.column),
                             ServerTextPosition(span.end_line - 1, span.end_column))
    return codec.range_to_client_units(lines, server)


def to_span(codec: PositionCodec, lines: list[str], rng: types.Range) -> Span:
    server = codec.range_from_client_units(lines, rng)
    return Span(server.start.line + 1, server.start.character, server.end.line + 1, server.end.character)


def reported(checked: Checked) -> list[Finding]:
    """What a check shows: its findings and, if the text was not analysed, the GG000 that says why."""
    failed = failure(checked)
    return [*checked.findings, failed] if failed is not None else list(checked.findings)


def diagnostic(finding: Finding, uri: str, version: int | None, codec: PositionCodec, lines: list[str],
               span_of=lambda span: span, related_at=None) -> types.Diagnostic:
    """`span_of` maps a span of the analysed text to the document's, and `related_at` a
    related span of it to its location (notebook cells: the cell it is in)."""
    rule = rule_by_code(finding.code)
    related_at = related_at or (lambda span: types.Location(uri=uri, range=to_range(codec, lines, span_of(span))))
    related = [types.DiagnosticRelatedInformation(
        location=related_at(r.span) if r.span.path is None else _elsewhere(codec, r.span), message=r.message)
        for r in finding.related]
    return types.Diagnostic(
        range=to_range(codec, lines, span_of(finding.span)),
        message=finding.message,
        severity=SEVERITY.get(finding.severity, types.DiagnosticSeverity.Warning),
        code=finding.code,
        code_description=types.CodeDescription(href=rule.url()) if rule else None,
        source="gradguard",
        related_information=related or None,
        data={"version": version, "name": finding.name,
              "fixes": [fix_to_json(f, span_of) for f in finding.fixes]},
    )


def _elsewhere(codec: PositionCodec, span: Span) -> types.Location:
    """A location in an imported module: its lines read from the file, for the client's units."""
    try:
        with open(span.path, encoding="utf-8", errors="replace", newline="") as f:
            lines = split_lines(f.read())
        rng = to_range(codec, lines, span)
    except (OSError, IndexError, ValueError):
        rng = types.Range(types.Position(span.line - 1, span.column), types.Position(span.end_line - 1, span.end_column))
    return types.Location(uri=from_fs_path(span.path) or span.path, range=rng)


def fix_to_json(fix: Fix, span_of=lambda span: span) -> dict:
    return {"title": fix.title, "preferred": fix.preferred, "applicability": fix.applicability,
            "edits": [{"kind": e.kind, "span": _span_json(span_of(e.span)), "name": e.name,
                       "target": _span_json(span_of(e.target)) if e.target else None} for e in fix.edits]}


def fix_from_json(data: dict) -> Fix:
    edits = tuple(Edit(e["kind"], Span(*e["span"]), e.get("name", ""),
                       Span(*e["target"]) if e.get("target") else None) for e in data["edits"])
    return Fix(data["title"], edits, bool(data.get("preferred")), data.get("applicability", "unsafe"))


def _span_json(span: Span) -> list[int]:
    return [span.line, span.column, span.end_line, span.end_column]
