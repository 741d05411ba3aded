"""The shape every rule has: identity, documentation and executable examples.

Rules only query the facts the flow engine established (see `gradguard.facts`) and
report; they never walk the syntax tree themselves.  A rule's class docstring is its
documentation in ruff's sections (What it does / Why is this bad? / Example / Use
instead / Fix safety); `gradguard rule CODE`, hover and the README all render that one text.
`VALID` and `INVALID` are run as tests (tests/test_rule_examples.py): every valid
snippet gives no finding of this rule, every invalid one gives one at the `# error`
marker line.
"""
from __future__ import annotations

import inspect
from pathlib import Path
from typing import ClassVar, Iterable

from gradguard.findings import Finding, Related

SECTIONS = ("## What it does", "## Why is this bad?", "## Example", "## Use instead", "## Fix safety")
DOCS_URL = "https://github.com/gradguard/gradguard/blob/main/docs/rules.md#{anchor}"


class Rule:
    code: ClassVar[str]
    name: ClassVar[str]
    predicts: ClassVar[str | None]  # the runtime error kind it predicts, None if advisory
    severity: ClassVar[str]  # "error" | "warning" | "info"
    summary: ClassVar[str]
    opt_in: ClassVar[bool] = False  # reported only when `select` names the code (not by `ALL` or a prefix)
    VALID: ClassVar[list[str]] = []
    INVALID: ClassVar[list[str]] = []

    def check(self, facts) -> Iterable[Finding]:
        raise NotImplementedError

    @classmethod
    def doc(cls) -> str:
        """The rule's documentation as markdown (heading, summary, the four sections)."""
        body = inspect.cleandoc(cls.__doc__ or "")
        predicts = f"Predicts: `{cls.predicts}` at run time." if cls.predicts else "Advisory: no runtime error."
        opt_in = f" Off unless `select` names {cls.code}." if cls.opt_in else ""
        return (f"# {cls.code} {cls.name}\n\n{cls.summary}\n\n{predicts} Default severity: {cls.severity}.{opt_in}"
                f"\n\n{body}\n")

    @classmethod
    def section(cls, title: str) -> str:
        """One section of the documentation (`"Why is this bad?"`) as a single paragraph, for
        the places that explain a finding or an error in a few lines (hover, `gradguard explain`)."""
        text = inspect.cleandoc(cls.__doc__ or "")
        marker = f"## {title}"
        if marker not in text:
            return ""
        return " ".join(text.split(marker, 1)[1].split("\n## ", 1)[0].split())

    @classmethod
    def url(cls) -> str:
        return DOCS_URL.format(anchor=f"{cls.code.lower()}-{cls.name}")

    def finding(self, message, span, related=(), fixes=(), *, facts=None, entry=None) -> Finding:
        """`entry`: for an error raised inside an imported module, the call in the checked file
        that runs it (`Backward.entry`, `Inplace.entry`): the finding is reported at that call,
        the raising line in the module its first related location."""
        if entry is not None:
            message = f"inside `{facts.text(entry)}`, at line {span.line} of {Path(span.path).name}: {message}"
            related = (Related(span, "raises here"), *related)
            span = facts.span(entry)
        return Finding(self.code, self.name, self.severity, message, span, tuple(related), tuple(fixes),
                       self.predicts)


class RaiseRule(Rule):
    """A rule about the ops that refuse the tensor they are given (`facts.Raise` of its
    `predicts` kind): the engine decides where they surely raise, the rule words it."""

    def raises(self, facts) -> list:
        return [r for r in facts.raises.values() if r.kind == self.predicts]


def first_per_statement(facts, items):
    """(item, statement) for the op of each statement that finishes first: torch raises there
    and the rest of the statement never runs (`w.mul_(d).add_(x)` is one error, at `w.mul_(d)`)."""
    from gradguard.fixes import statement_of

    raised = set()
    for item in sorted(items, key=lambda f: (f.node.end_lineno, f.node.end_col_offset)):
        stmt = statement_of(facts, item.node)
        if stmt not in raised:
            raised.add(stmt)
            yield item, stmt


def named(facts, r, otherwise: str) -> str:
    """The offending expression of a `Raise` in backquotes, or `otherwise`."""
    if r.target is None:
        return otherwise
    return f"a tensor in `{facts.text(r.target)}`" if r.member else f"`{facts.text(r.target)}`"


def origin_related(facts, r, what: str) -> tuple[Related, ...]:
    """Where the value a `Raise` is about got what makes the op raise (`... computed here,
    with a graph`), as a related location."""
    return tuple(Related(facts.span(node), f"{named(facts, r, 'the tensor')} is {what}") for node in r.origin)


class FindingsRule(Rule):
    """A rule about what the other rules found rather than about the code (GG100: `# noqa`
    comments that silence nothing): it runs after them, on the text and their findings, and
    its examples are tests like any rule's."""

    def check_findings(self, source: str, findings: list[Finding]) -> Iterable[Finding]:
        raise NotImplementedError
