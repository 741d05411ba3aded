"""GG005: `.numpy()` on a tensor that requires grad."""
from __future__ import annotations

from gradguard import fixes
from gradguard.facts import Facts
from gradguard.rules.base import RaiseRule, named, origin_related


class NumpyRequiresGrad(RaiseRule):
    """
    ## What it does
    Flags `t.numpy()`, and the numpy functions that call it (`np.array(t)`,
    `np.asarray(t)`, `np.stack([t, u])`), and arithmetic with a numpy array (`p - w`, which
    numpy carries out by converting `p`), on a tensor that requires grad — a parameter, a
    tensor made with `requires_grad=True`, or anything computed from one — while gradients
    are recorded.

    ## Why is this bad?
    A numpy array cannot carry autograd's graph, so torch refuses to hand one out:
    `RuntimeError: Can't call numpy() on Tensor that requires grad. Use
    tensor.detach().numpy() instead.` It typically surfaces in metrics, logging and
    plotting code that runs inside the training loop. Inside `torch.no_grad()` the same
    call converts without complaint.

    ## Example
    ```python
    probs = torch.softmax(model(x), dim=1)
    preds = probs.numpy()
    ```

    ## Use instead
    ```python
    probs = torch.softmax(model(x), dim=1)
    preds = probs.detach().numpy()
    ```

    ## Fix safety
    Safe: `.detach()` gives the same values without the graph, which a numpy array could
    not keep anyway. A sum or mean of tensors in numpy (`np.sum(losses)`) is first offered as
    the same reduction in torch (`torch.stack(losses).sum()`), which keeps the graph a summed
    loss is meant to have: unsafe, as the result is a tensor, not a numpy number. Arithmetic
    between the tensor and a numpy array (`p - w`, which numpy carries out by converting the
    tensor) first gets the array made a tensor (`p - torch.as_tensor(w)`): unsafe, the result
    is a tensor, in the dtype the two promote to.
    """

    code = "GG005"
    name = "numpy-requires-grad"
    predicts = "numpy_requires_grad"
    severity = "error"
    summary = "`.numpy()` (or `np.asarray`) on a tensor that requires grad while gradients are recorded"

    VALID = [
        """
import torch
x = torch.randn(3, requires_grad=True)
y = (x * 2).detach().numpy()
""",
        """
import torch
x = torch.randn(3, requires_grad=True)
with torch.no_grad():
    y = (x * 2).numpy()
""",
        """
import torch
x = torch.randn(3, requires_grad=True)
y = (x * 2).numpy(force=True)
""",
    ]
    INVALID = [
        """
import torch
x = torch.randn(3, requires_grad=True)
y = (x * 2).cpu().numpy()  # error
""",
        """
import numpy as np
import torch
import torch.nn as nn
model = nn.Linear(4, 2)
scores = np.asarray(model(torch.randn(8, 4)))  # error
""",
    ]

    def check(self, facts: Facts):
        for r in self.raises(facts):
            tensor = named(facts, r, "a tensor it is given")
            message = (f"{tensor} requires grad and gradients are recorded here: converting it to numpy raises "
                       f"'Can't call numpy() on Tensor that requires grad'")
            yield self.finding(message, facts.span(r.node), origin_related(facts, r, "computed here, with a graph"),
                               fixes.numpy_detach(facts, r), facts=facts, entry=r.entry)
