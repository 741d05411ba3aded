"""GG004: backward on a value that carries no graph."""
from __future__ import annotations

import ast

from gradguard import fixes
from gradguard.facts import Facts, position
from gradguard.findings import Related
from gradguard.rules.base import Rule


class NoGradFn(Rule):
    """
    ## What it does
    Flags a backward on a value that certainly does not require grad: computed under
    `torch.no_grad()`, from `.detach()`ed or graph-free values (`.item()`, `argmax`,
    integer casts, comparisons), from tensors that never required grad, or through a
    model whose parameters were all frozen with `requires_grad = False`.

    ## Why is this bad?
    There is no graph to differentiate: the call raises `RuntimeError: element 0 of
    tensors does not require grad and does not have a grad_fn`. Usually the gradient
    path was cut by accident — a non-differentiable op such as `argmax` in the loss, a
    forward pass left inside `no_grad`, or every parameter frozen.

    ## Example
    ```python
    pred = logits.argmax(dim=1).float()     # argmax has no gradient
    loss = F.l1_loss(pred, target)
    loss.backward()
    ```

    ## Use instead
    Keep a differentiable path from the parameters to the loss:
    ```python
    pred = (logits.softmax(dim=1) * bins).sum(dim=1)   # soft-argmax
    loss = F.l1_loss(pred, target)
    loss.backward()
    ```

    ## Fix safety
    Unsafe: every fix makes gradients flow where the code had stopped them, and may bring
    back errors in the graph it reconnects (fixed next, one at a time). The fixes, each
    offered only where it applies: remove the `.detach()`, the `no_grad` block or
    decorator, the `torch.set_grad_enabled(False)` or the `requires_grad_(False)` that cut
    the graph; replace an `argmax`/`argmin` whose index the loss uses as a number by a
    soft-argmax (the loss then sees expected indices); replace a thresholded mask used as a
    number (`(p > 0.5).float()`) by the probabilities `p`, and a class match on an argmax
    (`(logits.argmax(1) == y).float()`) by the softmax probability of that class (the loss
    becomes its soft version, as in soft Dice); write a loss computed with numpy
    (`.numpy()` ... `torch.tensor(result)`) with torch; keep losses as tensors
    (`torch.stack(losses)`, not `torch.tensor([l.item() for ...])`); use `torch.as_tensor(t)`,
    which returns a tensor `t` itself (converted if a dtype is given), for `torch.tensor(t)`,
    which copies its values without the graph; call
    `.requires_grad_()` on hand-made weights given to an optimizer.
    """

    code = "GG004"
    name = "backward-without-grad-fn"
    predicts = "no_grad_fn"
    severity = "error"
    summary = "backward() on a value that does not require grad and has no grad_fn"

    VALID = [
        """
import torch
x = torch.randn(3, requires_grad=True)
(x * 2).sum().backward()
""",
    ]
    INVALID = [
        """
import torch
x = torch.randn(3, requires_grad=True)
with torch.no_grad():
    y = (x * 2).sum()
y.backward()  # error
""",
        """
import torch
x = torch.randn(3, requires_grad=True)
y = x.detach().sum()
y.backward()  # error
""",
    ]

    def check(self, facts: Facts):
        for b in facts.backwards.values():
            if not b.no_grad_fn:
                continue
            root = facts.text(b.root) if b.root is not None else "this value"
            cuts = sorted(b.cuts, key=position)
            why = ("its graph is cut at " + ", ".join(f"`{_describe(facts, c)}` ({facts.line(c)})" for c in cuts[:3])
                   if cuts else "nothing on its path requires grad")
            message = (f"`{root}` does not require grad ({why}): this raises 'element 0 of tensors does not "
                       f"require grad and does not have a grad_fn'")
            related = [Related(facts.span(c), "the graph is cut here") for c in cuts[:3]]
            yield self.finding(message, facts.span(b.node), related, fixes.no_grad_fn(facts, b), facts=facts,
                               entry=b.entry)


def _describe(facts: Facts, node) -> str:
    if isinstance(node, (ast.With, ast.AsyncWith)):
        return facts.text(node.items[0].context_expr)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return f"@no_grad def {node.name}"
    return facts.text(node, 40)
