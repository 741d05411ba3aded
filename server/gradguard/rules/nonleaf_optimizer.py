"""GG007: an optimizer given a tensor that is not a leaf."""
from __future__ import annotations

from gradguard import fixes
from gradguard.facts import Facts
from gradguard.rules.base import RaiseRule, named, origin_related


class NonLeafOptimizer(RaiseRule):
    """
    ## What it does
    Flags a `torch.optim` optimizer (or its `add_param_group`) given a tensor that is the
    result of an operation rather than a leaf: `torch.randn(n, requires_grad=True) * 0.01`,
    a slice, a `view`, a dtype conversion of a tensor that requires grad, directly or in a
    parameter-group dict.

    ## Why is this bad?
    An optimizer updates the tensors it holds from their `.grad`, which autograd fills
    only for leaves, so torch refuses the tensor when the optimizer is made:
    `ValueError: can't optimize a non-leaf Tensor`. The scaling or conversion made a new
    tensor; the leaf that gets gradients is the one before it.

    ## Example
    ```python
    w = torch.randn(784, 10, requires_grad=True) * 0.01
    optimizer = torch.optim.SGD([w], lr=0.1)
    ```

    ## Use instead
    ```python
    w = (torch.randn(784, 10) * 0.01).requires_grad_()
    optimizer = torch.optim.SGD([w], lr=0.1)
    ```

    ## Fix safety
    Unsafe: the fix makes the computed value a leaf of its own (`.detach().requires_grad_()`
    where it is assigned), so gradients no longer reach the tensors it was computed from.
    That is what an optimizer of this tensor needs, but code that read the old leaf's
    `.grad` sees None. A parameter converted after it was made
    (`nn.Parameter(t).to(torch.float64)`) is converted before instead
    (`nn.Parameter(t.to(torch.float64))`): also unsafe, as the module now registers it among
    its parameters (an optimizer given both `model.parameters()` and the tensor holds it twice).
    """

    code = "GG007"
    name = "nonleaf-optimizer"
    predicts = "nonleaf_optimizer"
    severity = "error"
    summary = "a tensor computed by an operation (not a leaf) is given to an optimizer"

    VALID = [
        """
import torch
w = (torch.randn(3, 4) * 0.01).requires_grad_()
optimizer = torch.optim.SGD([w], lr=0.1)
""",
        """
import torch
w = torch.randn(3, 4, requires_grad=True).to("cpu")
optimizer = torch.optim.SGD([w], lr=0.1)
""",
    ]
    INVALID = [
        """
import torch
w = torch.randn(3, 4, requires_grad=True) * 0.01
optimizer = torch.optim.SGD([w], lr=0.1)  # error
""",
        """
import torch
emb = torch.zeros(10, 4, requires_grad=True)
prompt = emb[:2]
optimizer = torch.optim.Adam([{"params": [prompt], "lr": 1e-3}])  # error
""",
    ]

    def check(self, facts: Facts):
        for r in self.raises(facts):
            tensor = named(facts, r, "a tensor")
            message = (f"{tensor} is not a leaf (an operation computed it) and the optimizer is given it: "
                       f"this raises \"can't optimize a non-leaf Tensor\"")
            flagged = r.target if r.target is not None and r.target.lineno == r.node.lineno else r.node
            yield self.finding(message, facts.span(flagged), origin_related(facts, r, "computed here, not a leaf"),
                               fixes.new_leaf(facts, r), facts=facts, entry=r.entry)
