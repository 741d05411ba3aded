"""GG008: `requires_grad` changed on a tensor that is not a leaf."""
from __future__ import annotations

from gradguard import fixes
from gradguard.facts import Facts
from gradguard.rules.base import RaiseRule, named, origin_related


class RequiresGradNonLeaf(RaiseRule):
    """
    ## What it does
    Flags `t.requires_grad = ...` and `t.requires_grad_(False)` on a tensor that an
    operation computed from something that requires grad (it has a `grad_fn`).

    ## Why is this bad?
    Only a leaf has a requires_grad flag of its own; a computed tensor requires grad
    because its inputs do. Torch refuses the change: `RuntimeError: you can only change
    requires_grad flags of leaf variables.` To stop gradients at a computed tensor, use
    the detached copy; to make it an input whose gradient you want, detach it and set the
    flag on the copy.

    ## Example
    ```python
    features = backbone(x)
    features.requires_grad = False
    ```

    ## Use instead
    ```python
    features = backbone(x)
    features = features.detach()
    features.requires_grad = False
    ```

    ## Fix safety
    Safe when the flag is set to False: the detached tensor is what the statement asked
    for. Setting it to True becomes `t.requires_grad_()`, also safe: it turns grad on for a
    leaf and accepts a tensor that already requires grad, so it is right whether the line
    sees one or the other. (Detaching first, offered too, is unsafe there: gradients would
    no longer flow back through what computed the tensor.) When the program reads `.grad`,
    which autograd fills only for leaves, and the tensor does not `retain_grad()`, making it
    a leaf where it is computed (`.detach().requires_grad_()`) or detaching it first comes
    first (unsafe, for the same reason); a loop variable is not detached, as the tensors it
    iterates would keep their flags.
    """

    code = "GG008"
    name = "requires-grad-nonleaf"
    predicts = "requires_grad_nonleaf"
    severity = "error"
    summary = "`requires_grad` changed on a tensor computed by an operation (not a leaf)"

    VALID = [
        """
import torch
x = torch.randn(3, requires_grad=True)
y = (x * 2).detach()
y.requires_grad = True
""",
        """
import torch
x = torch.randn(3, requires_grad=True)
y = x * 2
y.requires_grad_(True)
""",
    ]
    INVALID = [
        """
import torch
x = torch.randn(3, requires_grad=True)
y = x * 2
y.requires_grad = False  # error
""",
        """
import torch
import torch.nn as nn
backbone = nn.Linear(4, 4)
features = backbone(torch.randn(2, 4))
features.requires_grad_(False)  # error
""",
    ]

    def check(self, facts: Facts):
        for r in self.raises(facts):
            tensor = named(facts, r, "this tensor")
            message = (f"{tensor} is not a leaf (an operation computed it from tensors that require grad): changing "
                       f"its requires_grad raises 'you can only change requires_grad flags of leaf variables'")
            yield self.finding(message, facts.span(fixes.statement_of(facts, r.node)),
                               origin_related(facts, r, "computed here, with a graph"),
                               fixes.detach_flag(facts, r), facts=facts, entry=r.entry)
