"""GG002: a tensor saved for backward was modified in place before that backward."""
from __future__ import annotations

from gradguard import fixes
from gradguard.facts import Facts, position
from gradguard.findings import Related
from gradguard.rules.base import Rule


class InplaceSaved(Rule):
    """
    ## What it does
    Flags a backward whose graph needs a tensor that was modified in place after the
    forward pass saved it: `optimizer.step()` between a forward and the backward that
    still needs the old parameters (a GAN's second loss after the first step), or `+=`,
    `relu_()`, `masked_fill_()`, `x[i] = ...` on a tensor an op saved (`sigmoid`,
    `softmax`, `exp` save their output; `mul`, `mm`, `pow` save their inputs).

    ## Why is this bad?
    Autograd checks each saved tensor's version counter when it is used. An in-place
    change bumps it, and the backward raises `RuntimeError: one of the variables needed
    for gradient computation has been modified by an inplace operation`. An in-place op
    on a tensor that no op saved (`y = x * 2; y.add_(1)`) is fine: only saved tensors
    matter, which is what GradGuard checks.

    ## Example
    ```python
    attn = sim.softmax(dim=-1)        # softmax saves its output
    attn.masked_fill_(mask, 0.0)      # ... which is overwritten here
    out = attn @ v
    out.sum().backward()              # raises
    ```

    ## Use instead
    Use the out-of-place op (`attn = attn.masked_fill(mask, 0.0)`), `.clone()` before
    modifying, or move `optimizer.step()` after every backward that needs the old
    parameters:
    ```python
    attn = sim.softmax(dim=-1)
    attn = attn.masked_fill(mask, 0.0)
    out = attn @ v
    out.sum().backward()
    ```

    ## Fix safety
    Safe: the out-of-place op, `inplace=False` and `.clone()` compute the same values, only
    without overwriting the saved tensor (they use a little more memory); inside an
    expression (`code = h.sigmoid_()`) the out-of-place op is offered only when nothing
    else reads the tensor it would have changed. Unsafe: moving `optimizer.step()` (the
    second loss then sees the old weights; over micro-batches of one forward, the pieces'
    gradients are accumulated and the step runs once after them), rebuilding a value made before the loop in
    every iteration, and `.detach()` (no gradient through the cut).
    """

    code = "GG002"
    name = "saved-tensor-modified-inplace"
    predicts = "inplace_version"
    severity = "error"
    summary = "a tensor saved for backward is modified in place before that backward runs"

    VALID = [
        """
import torch
x = torch.randn(3, requires_grad=True)
y = x * 2
y.add_(1)
y.sum().backward()
""",
        """
import torch
x = torch.randn(3, requires_grad=True)
y = x.sigmoid()
y = y + 1
y.sum().backward()
""",
    ]
    INVALID = [
        """
import torch
x = torch.randn(3, requires_grad=True)
y = x.sigmoid()
y.add_(1)
y.sum().backward()  # error
""",
        """
import torch
import torch.nn as nn
G, D = nn.Linear(2, 2), nn.Linear(2, 2)
opt_d = torch.optim.Adam(D.parameters())
g = G(torch.randn(4, 2))
d = D(g)
d.sum().backward(retain_graph=True)
opt_d.step()
(g + d).sum().backward()  # error
""",
    ]

    def check(self, facts: Facts):
        for b in facts.backwards.values():
            if not b.dirty_hit or b.freed_hit:
                continue
            regions = sorted((facts.regions[r] for r in b.dirty_hit), key=lambda r: (position(r.node), r.order))
            first = regions[0]
            # (a call may be its own changer: a Sequential whose in-place layer overwrites what the one before saved)
            changers = sorted({n for r in b.dirty_hit for n in facts.dirtied_by.get(r, ())},
                              key=position)
            names = first.modified or first.saved_names  # what was changed since, when known
            saved = ", ".join(sorted(n if n != "result" else "its output" for n in names)) or "a tensor"
            what = ", ".join(f"`{facts.text(n)}` ({facts.line(n)})" for n in changers[:2]) or "an in-place op"
            root = facts.text(b.root) if b.root is not None else "this value"
            made = f"`{facts.text(first.node)}` ({facts.line(first.node)})"
            message = (f"`{root}` is backpropagated through {made}, which saved "
                       f"{saved} for backward; {what} modified it in place since: this raises 'one of the variables "
                       f"needed for gradient computation has been modified by an inplace operation'")
            related = [Related(facts.span(n), "modified in place here") for n in changers[:3]]
            related.append(Related(facts.span(first.node), f"`{facts.text(first.node)}` saved it here"))
            yield self.finding(message, facts.span(b.node), related, fixes.inplace_saved(facts, b, changers),
                               facts=facts, entry=b.entry)

