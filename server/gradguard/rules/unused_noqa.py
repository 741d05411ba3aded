"""GG100: a `# noqa` comment that no longer silences anything (ruff's RUF100)."""
from __future__ import annotations

from gradguard.findings import Edit, Finding, Fix, Span
from gradguard.rules.base import FindingsRule
from gradguard.suppress import Noqa


class UnusedNoqa(FindingsRule):
    """
    ## What it does
    Flags a `# noqa: GG...` comment, or a `# gradguard: noqa` line, that silences no
    finding: the code it names is not found on its line (in its file, for
    `# gradguard: noqa`), or is no GradGuard rule at all. Off unless `select` names
    GG100 (`select = ["ALL", "GG100"]`, `--select ALL,GG100`).

    Only GradGuard's codes are looked at: a `# noqa: E501` for another tool, and a bare
    `# noqa` (which may be another tool's), are never reported. Whether a finding is
    reported does not matter: a noqa for a rule that `ignore` or `per-file-ignores` turns
    off is still in use.

    ## Why is this bad?
    A suppression outlives the bug it hid: after the code is fixed, the comment stays
    and will silently hide the next real error on that line.

    ## Example
    ```python
    loss.backward()  # noqa: GG001  (the second backward it excused is gone)
    ```

    ## Use instead
    ```python
    loss.backward()
    ```

    ## Fix safety
    Safe: the fix removes the unused codes, or the whole comment when nothing else is
    left in it; comments cannot change what the program computes.
    """

    code = "GG100"
    name = "unused-noqa"
    predicts = None
    severity = "warning"
    summary = "a `# noqa` comment for GradGuard silences no finding"
    opt_in = True

    VALID = [
        """
import torch
x = torch.randn(3, requires_grad=True)
y = (x ** 2).sum()
y.backward()
y.backward()  # noqa: GG001
z = y * 2  # noqa: E501
w = z + 1  # noqa
""",
        """
# gradguard: noqa: GG001
import torch
x = torch.randn(3, requires_grad=True)
y = (x ** 2).sum()
y.backward()
y.backward()
""",
    ]
    INVALID = [
        """
import torch
x = torch.randn(3, requires_grad=True)
y = (x ** 2).sum()
y.backward()  # noqa: GG001  # error
""",
    ]

    def check_findings(self, source: str, findings: list[Finding]):
        from gradguard.rules import rule_by_code  # the registry imports this module

        noqa = Noqa(source)
        for directive, codes in noqa.unused(findings, exempt=self.code):
            kind = "`gradguard: noqa`" if directive.file else "`noqa`"
            if codes is None:
                message = f"unused {kind} directive: no finding in this file to silence"
            else:
                unknown = [code for code in codes if rule_by_code(code) is None]
                parts = [f"{label}: {', '.join(f'`{c}`' for c in group)}" for label, group in
                         (("unused", [c for c in codes if c not in unknown]), ("unknown", unknown)) if group]
                message = f"unused {kind} directive ({'; '.join(parts)})"
            span, text = noqa.without(directive, codes)
            yield self.finding(message, Span(directive.line, directive.column, directive.line, directive.end),
                               fixes=(Fix("Remove unused `noqa` directive", (Edit("replace", span, text),),
                                          preferred=True, applicability="safe"),))
