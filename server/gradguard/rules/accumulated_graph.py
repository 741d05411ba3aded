"""GG102: a running total of losses keeps every iteration's graph alive."""
from __future__ import annotations

from gradguard.facts import Facts
from gradguard import fixes
from gradguard.rules.base import Rule


class AccumulatedGraph(Rule):
    """
    ## What it does
    Flags `total += loss` in a training loop (one that runs backward) when `loss`
    carries an autograd graph and the total is never backpropagated.

    ## Why is this bad?
    Each addition links the new loss's graph to the total, so every iteration's graph
    (activations included) stays in memory until the total is dropped: memory grows
    with every step until the process runs out.

    ## Example
    ```python
    total = 0
    for x, y in loader:
        loss = F.mse_loss(model(x), y)
        loss.backward()
        total += loss
    ```

    ## Use instead
    ```python
    total = 0
    for x, y in loader:
        loss = F.mse_loss(model(x), y)
        loss.backward()
        total += loss.item()
    ```

    ## Fix safety
    Safe: accumulating `.detach()` keeps the same values, as a tensor, and frees each
    iteration's graph. Unsafe: accumulating `.item()` does too, but as a Python float, which
    code calling tensor methods on the total (`total.item()`) no longer can.
    """

    code = "GG102"
    name = "loss-accumulated-with-graph"
    predicts = None
    severity = "warning"
    summary = "a running total of losses keeps every iteration's graph alive"

    VALID = [
        """
import torch
w = torch.randn(3, requires_grad=True)
total = 0
for i in range(3):
    loss = (w * i).sum()
    loss.backward()
    total += loss.item()
""",
        """
import torch
w = torch.randn(3, requires_grad=True)
total = 0
for i in range(3):
    total += (w * i).sum()
total.backward()
""",
    ]
    INVALID = [
        """
import torch
w = torch.randn(3, requires_grad=True)
total = 0
for i in range(3):
    loss = (w * i).sum()
    loss.backward()
    total += loss  # error
""",
    ]

    def check(self, facts: Facts):
        for f in facts.accumulations.values():
            if f.region in facts.consumed_regions or not any(k in facts.backward_loops for k in f.loops):
                continue
            target = facts.text(f.node.target)
            value = facts.text(f.node.value)
            message = (f"`{target} += {value}` keeps the graph of every iteration alive (`{target}` is never "
                       f"backpropagated): accumulate `{value}.detach()` (or `.item()`) instead")
            yield self.finding(message, facts.span(f.node), (), fixes.accumulate_item(facts, f.node))
