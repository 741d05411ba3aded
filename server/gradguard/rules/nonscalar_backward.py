"""GG006: backward of a tensor of several elements without a gradient."""
from __future__ import annotations

from gradguard import fixes
from gradguard.facts import Facts
from gradguard.rules.base import RaiseRule, named, origin_related


class NonScalarBackward(RaiseRule):
    """
    ## What it does
    Flags `y.backward()` and `torch.autograd.grad(y, x)` without a `gradient` (or
    `grad_outputs`) when `y` surely has more than one element: a loss built with
    `reduction="none"`, an elementwise loss that is never averaged, a reduction over one
    dimension only, `torch.stack` of several losses. Sizes come only from what the code
    states (`torch.randn(32, 10)`, `nn.Linear(16, 4)`); a size read from data is unknown.

    ## Why is this bad?
    Backward needs the gradient of the loss with respect to itself; torch makes it (a 1)
    only for a single element. Otherwise it raises `RuntimeError: grad can be implicitly
    created only for scalar outputs`.

    ## Example
    ```python
    criterion = nn.MSELoss(reduction="none")
    loss = criterion(model(x), y)
    loss.backward()
    ```

    ## Use instead
    ```python
    criterion = nn.MSELoss(reduction="none")
    loss = criterion(model(x), y).mean()
    loss.backward()
    ```

    ## Fix safety
    Unsafe: averaging or summing decides the scale of the gradients, which the code did not
    say. A loss left unreduced (`reduction="none"`) is averaged first, as losses are by
    default; anything else is summed first, the gradient `torch.ones_like(y)` gives (each
    element's own derivative); the other is offered too. A tensor read again after its
    backward (`loss.item()`) is reduced where it is computed, so those reads get one element
    too. `torch.autograd.grad` gets
    `grad_outputs=torch.ones_like(y)`, the gradient of the sum, which is each sample's own
    gradient when samples are independent.
    """

    code = "GG006"
    name = "nonscalar-backward"
    predicts = "nonscalar_backward"
    severity = "error"
    summary = "backward() of a tensor of several elements without a gradient"

    VALID = [
        """
import torch
x = torch.randn(8, 3, requires_grad=True)
loss = (x ** 2).mean()
loss.backward()
""",
        """
import torch
x = torch.randn(8, 3, requires_grad=True)
y = x ** 2
y.backward(torch.ones_like(y))
""",
    ]
    INVALID = [
        """
import torch
x = torch.randn(8, 3, requires_grad=True)
loss = (x ** 2).sum(dim=1)
loss.backward()  # error
""",
        """
import torch
import torch.nn as nn
model = nn.Linear(4, 2)
x, y = torch.randn(16, 4), torch.randn(16, 2)
loss = nn.MSELoss(reduction="none")(model(x), y)
loss.backward()  # error
""",
    ]

    def check(self, facts: Facts):
        for r in self.raises(facts):
            tensor = named(facts, r, "the output")
            message = (f"{tensor} has more than one element and no gradient is given for it: this raises 'grad can be "
                       f"implicitly created only for scalar outputs'")
            yield self.finding(message, facts.span(r.node), origin_related(facts, r, "computed here"),
                               fixes.reduce_output(facts, r), facts=facts, entry=r.entry)
