"""GG010: `torch.autograd.grad` asked for an input its outputs do not use."""
from __future__ import annotations

from gradguard import fixes
from gradguard.facts import Facts
from gradguard.findings import Related
from gradguard.rules.base import RaiseRule, named


class GradUnused(RaiseRule):
    """
    ## What it does
    Flags `torch.autograd.grad(outputs, inputs)` where one of the inputs (a tensor that
    requires grad, or the parameters of a layer) takes no part in computing the outputs:
    it was detached, recomputed or copied on the way (`x.clone()`, `x.to(...)`), used only
    under `torch.no_grad()`, belongs to a layer this forward pass never called, or is a view
    made in the call itself (`x[a:b]`: a new tensor no earlier graph can contain).

    ## Why is this bad?
    Autograd can only differentiate through the graph the outputs were recorded in. Unless
    `allow_unused=True`, torch raises `RuntimeError: The differentiated Tensor at index i
    appears to not have been used in the graph.` Often the input named is not the tensor
    the outputs were computed from (a copy of it was used instead): then the gradient that
    was meant is of the other tensor.

    ## Example
    ```python
    x = torch.randn(8, 2, requires_grad=True)
    u = net(x.clone())
    du_dx, = torch.autograd.grad(u.sum(), x)
    ```

    ## Use instead
    ```python
    x = torch.randn(8, 2, requires_grad=True)
    u = net(x)
    du_dx, = torch.autograd.grad(u.sum(), x)
    ```

    ## Fix safety
    Safe: for a view made in the call, differentiating with respect to the tensor viewed and
    slicing its gradient the same way (`tuple(g[a:b] for g in torch.autograd.grad(y, x))`)
    gives the gradient that was asked for.
    Unsafe: `materialize_grads=True` makes the gradient of an unused input zeros instead of
    an error, which is right when the input is truly unused (a layer skipped in this pass)
    and hides the mistake when the wrong tensor was named.
    """

    code = "GG010"
    name = "grad-unused"
    predicts = "grad_unused"
    severity = "error"
    summary = "`torch.autograd.grad` of an input that the outputs do not depend on"

    VALID = [
        """
import torch
x = torch.randn(3, requires_grad=True)
y = torch.randn(3, requires_grad=True)
gx, gy = torch.autograd.grad((x * y).sum(), [x, y])
""",
        """
import torch
x = torch.randn(3, requires_grad=True)
y = torch.randn(3, requires_grad=True)
gx, gy = torch.autograd.grad((x * 2).sum(), [x, y], allow_unused=True)
""",
    ]
    INVALID = [
        """
import torch
x = torch.randn(3, requires_grad=True)
y = torch.randn(3, requires_grad=True)
gx, gy = torch.autograd.grad((x * 2).sum(), [x, y])  # error
""",
        """
import torch
import torch.nn as nn
body, head = nn.Linear(4, 4), nn.Linear(4, 2)
params = list(body.parameters()) + list(head.parameters())
loss = body(torch.randn(3, 4)).pow(2).mean()
grads = torch.autograd.grad(loss, params)  # error
""",
    ]

    def check(self, facts: Facts):
        for r in self.raises(facts):
            if r.target is not None:
                what = (f"{named(facts, r, 'a tensor')}, which the outputs do not depend on (if they were computed "
                        f"from a copy of it, that copy is the tensor to differentiate)")
            else:
                what = "the parameters of a layer the outputs do not depend on"
            message = (f"`torch.autograd.grad` is asked for the gradient of {what}: this raises 'The differentiated "
                       f"Tensor at index i appears to not have been used in the graph'")
            related = tuple(Related(facts.span(c), "a graph computed from it is cut here") for c in r.origin)
            yield self.finding(message, facts.span(r.node), related, fixes.allow_unused(facts, r), facts=facts,
                               entry=r.entry)
