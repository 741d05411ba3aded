"""What an analysis reports: plain data, free of any editor or LSP type.

Positions are 1-based lines and 0-based *character* columns (not UTF-8 bytes, not UTF-16
units): the CLI prints them 1-based, the language server converts them to UTF-16.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Span:
    line: int
    column: int
    end_line: int
    end_column: int


@dataclass(frozen=True)
class Related:
    """A cause location: where the graph was freed, where the value came from, ..."""

    span: Span
    message: str


@dataclass(frozen=True)
class Fix:
    """A kind of fix that applies to a finding, computed from the data flow.

    `kind` is one of: "detach", "no_grad", "retain_graph", "item", "retain_grad",
    "clone", "zero_grad".  `spans` are the places the edit targets (the expression to
    detach, the statements to wrap, the backward call that keeps the graph, ...);
    `name` is the value involved, when there is one.  The language server turns these
    into libcst edits lazily.  Several spans mean one edit at each (two `.detach()`s).
    """

    kind: str
    title: str
    spans: tuple[Span, ...]
    name: str = ""
    preferred: bool = False


@dataclass(frozen=True)
class Finding:
    code: str
    name: str
    severity: str  # "error" | "warning" | "info"
    message: str
    span: Span
    related: tuple[Related, ...] = ()
    fixes: tuple[Fix, ...] = ()
    predicts: str | None = None

    def with_severity(self, severity: str) -> "Finding":
        return Finding(self.code, self.name, severity, self.message, self.span,
                       self.related, self.fixes, self.predicts)


@dataclass
class FileResult:
    """The outcome of checking one source text: findings, or one line saying why not."""

    path: str
    findings: list[Finding] = field(default_factory=list)
    error: str | None = None
