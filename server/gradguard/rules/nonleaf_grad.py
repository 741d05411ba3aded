"""GG101: `.grad` read on a tensor that is not a leaf."""
from __future__ import annotations

from gradguard.facts import Facts
from gradguard import fixes
from gradguard.rules.base import Rule


class NonLeafGrad(Rule):
    """
    ## What it does
    Flags `.grad` read on a tensor that is the result of an operation (not a leaf) and
    did not call `.retain_grad()`.

    ## Why is this bad?
    Autograd fills `.grad` only for leaves. On a non-leaf it stays `None` (torch warns
    once), so code that logs or clips it silently works with nothing.

    ## Example
    ```python
    x = torch.randn(3, requires_grad=True)
    y = x * 2
    y.sum().backward()
    print(y.grad)          # None
    ```

    ## Use instead
    ```python
    y = x * 2
    y.retain_grad()
    y.sum().backward()
    print(y.grad)
    ```

    ## Fix safety
    Safe: `retain_grad()` only keeps the gradient for reading; nothing else changes.
    """

    code = "GG101"
    name = "nonleaf-grad-read"
    predicts = None
    severity = "warning"
    summary = "`.grad` of a non-leaf tensor is None unless it calls retain_grad()"

    VALID = [
        """
import torch
x = torch.randn(3, requires_grad=True)
y = x * 2
y.retain_grad()
y.sum().backward()
print(y.grad)
""",
        """
import torch
x = torch.randn(3, requires_grad=True)
(x * 2).sum().backward()
print(x.grad)
""",
    ]
    INVALID = [
        """
import torch
x = torch.randn(3, requires_grad=True)
y = x * 2
y.sum().backward()
print(y.grad)  # error
""",
    ]

    def check(self, facts: Facts):
        for f in facts.grad_reads.values():
            name = facts.text(f.node.value)
            message = f"`{name}` is not a leaf tensor: its `.grad` is None unless `{name}.retain_grad()` is called"
            yield self.finding(message, facts.span(f.node), (), fixes.retain_grad(facts, f.node))
