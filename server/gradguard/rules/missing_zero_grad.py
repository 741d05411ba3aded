"""GG103: a training loop that never clears gradients."""
from __future__ import annotations

import ast

from gradguard.facts import Facts
from gradguard.findings import Related
from gradguard.ids import gid
from gradguard import fixes
from gradguard.rules.base import Rule


class MissingZeroGrad(Rule):
    """
    ## What it does
    Flags a loop whose body runs backward and an optimizer step but never clears the
    gradients (`optimizer.zero_grad()`, `model.zero_grad()`, `p.grad = None`).

    ## Why is this bad?
    `backward()` adds into `.grad`. Without clearing, every step uses the sum of all
    gradients so far: training diverges or crawls, with no error to point at it.
    (Deliberate gradient accumulation clears every few steps, which this rule accepts.)

    ## Example
    ```python
    for x, y in loader:
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
    ```

    ## Use instead
    ```python
    for x, y in loader:
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
    ```

    ## Fix safety
    Unsafe: clearing the gradients every iteration changes the updates when the
    accumulation was meant.
    """

    code = "GG103"
    name = "missing-zero-grad"
    predicts = None
    severity = "warning"
    summary = "a loop runs backward() and optimizer.step() but never clears the gradients"

    VALID = [
        """
import torch
w = torch.randn(3, requires_grad=True)
opt = torch.optim.SGD([w], lr=0.1)
for i in range(3):
    opt.zero_grad()
    (w * i).sum().backward()
    opt.step()
""",
    ]
    INVALID = [
        """
import torch
w = torch.randn(3, requires_grad=True)
opt = torch.optim.SGD([w], lr=0.1)
for i in range(3):
    (w * i).sum().backward()
    opt.step()  # error
""",
    ]

    def check(self, facts: Facts):
        inner_loops = {gid(f.loop) for f in facts.loop_steps.values()}
        for f in facts.loop_steps.values():
            if any(gid(n) in inner_loops for n in ast.walk(f.loop) if n is not f.loop):
                continue  # report the innermost loop only
            opt = facts.text(f.step.func.value) if isinstance(f.step, ast.Call) and \
                isinstance(f.step.func, ast.Attribute) else "optimizer"
            message = (f"this loop calls backward() and `{facts.text(f.step)}` but never clears gradients: each "
                       f"step adds to the previous ones (call `{opt}.zero_grad()` every iteration)")
            yield self.finding(message, facts.span(f.step), [Related(facts.span(f.loop), "the loop")],
                               fixes.zero_grad(facts, f.loop, opt))

