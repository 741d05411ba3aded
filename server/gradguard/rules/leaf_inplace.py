"""GG003: in-place op on a leaf tensor that requires grad."""
from __future__ import annotations

from gradguard.facts import Facts
from gradguard import fixes
from gradguard.rules.base import Rule, first_per_statement


class LeafInplace(Rule):
    """
    ## What it does
    Flags an in-place operation (`+=`, `-=`, `*=`, `w[i] = ...`, `w.add_()`, `w.zero_()`)
    on a leaf tensor that requires grad — a parameter, or a tensor made with
    `requires_grad=True` — or on a view of one (`w[0] *= 2`), while gradient mode is on.

    ## Why is this bad?
    Autograd cannot record an in-place change of a leaf it accumulates gradients into:
    the statement raises `RuntimeError: a leaf Variable that requires grad is being used
    in an in-place operation` (or `a view of a leaf Variable ...`). Manual parameter
    updates and weight edits must run with gradient recording off.

    ## Example
    ```python
    w = torch.randn(3, requires_grad=True)
    loss = (w * x).sum()
    loss.backward()
    w -= 0.1 * w.grad
    ```

    ## Use instead
    ```python
    with torch.no_grad():
        w -= 0.1 * w.grad
    ```

    ## Fix safety
    Safe: wrapping the update in `with torch.no_grad():` is what the update meant; the
    values are the same and no graph is recorded for it.
    """

    code = "GG003"
    name = "leaf-inplace"
    predicts = "leaf_inplace"
    severity = "error"
    summary = "an in-place op modifies a leaf tensor that requires grad (or a view of one) outside no_grad"

    VALID = [
        """
import torch
w = torch.randn(3, requires_grad=True)
with torch.no_grad():
    w -= 0.1
""",
        """
import torch
w = torch.randn(3)
w += 1
""",
    ]
    INVALID = [
        """
import torch
w = torch.randn(3, requires_grad=True)
w += 1  # error
""",
        """
import torch
import torch.nn as nn
lin = nn.Linear(4, 4)
lin.weight[:, 0] -= 0.5  # error
""",
    ]

    def check(self, facts: Facts):
        for f, stmt in first_per_statement(facts, (f for f in facts.inplaces.values() if f.leaf_requires_grad)):
            target = facts.text(f.target) if f.target is not None else "the tensor"
            kind = "a view of a leaf tensor" if f.is_view_of_leaf else "a leaf tensor"
            message = (f"in-place change of `{target}`, {kind} that requires grad, while gradients are recorded: "
                       f"this raises 'a leaf Variable that requires grad is being used in an in-place operation'")
            # raised inside an imported helper: the fix wraps its call in this file
            yield self.finding(message, facts.span(stmt if stmt is f.node else f.node), (),
                               fixes.leaf_inplace(facts, f.entry or f.node), facts=facts, entry=f.entry)
