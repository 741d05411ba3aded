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
from typing import ClassVar, Iterable

from gradguard.findings import Finding

SECTIONS = ("## What it does", "## Why is this bad?", "## Example", "## Use instead", "## Fix safety")
DOCS_URL = "https://github.com/gradguard/gradguard/blob/main/docs/rules.md#{anchor}"


class Rule:
    code: ClassVar[str]
    name: ClassVar[str]
    predicts: ClassVar[str | None]  # the runtime error kind it predicts, None if advisory
    severity: ClassVar[str]  # "error" | "warning" | "info"
    summary: ClassVar[str]
    VALID: ClassVar[list[str]] = []
    INVALID: ClassVar[list[str]] = []

    def check(self, facts) -> Iterable[Finding]:
        raise NotImplementedError

    @classmethod
    def doc(cls) -> str:
        """The rule's documentation as markdown (heading, summary, the four sections)."""
        body = inspect.cleandoc(cls.__doc__ or "")
        predicts = f"Predicts: `{cls.predicts}` at run time." if cls.predicts else "Advisory: no runtime error."
        return f"# {cls.code} {cls.name}\n\n{cls.summary}\n\n{predicts} Default severity: {cls.severity}.\n\n{body}\n"

    @classmethod
    def url(cls) -> str:
        return DOCS_URL.format(anchor=f"{cls.code.lower()}-{cls.name}")

    def finding(self, message, span, related=(), fixes=()) -> Finding:
        return Finding(self.code, self.name, self.severity, message, span, tuple(related), tuple(fixes),
                       self.predicts)
