"""GG009: an inference tensor saved for backward, or changed in place, outside inference mode."""
from __future__ import annotations

import ast

from gradguard import fixes
from gradguard.facts import Facts
from gradguard.findings import Related
from gradguard.rules.base import RaiseRule, first_per_statement, named


class InferenceTensor(RaiseRule):
    """
    ## What it does
    Flags a tensor made inside `torch.inference_mode()` (a `with` block or a function
    decorated `@torch.inference_mode()`) that is used, outside inference mode, by an op
    that saves it for backward (`x * w`, a `Linear` layer, `torch.matmul`) while another
    input requires grad, or that is changed in place (`+=`, `x[i] = ...`, `.copy_()`).

    ## Why is this bad?
    Inference mode is stricter than `torch.no_grad()`: the tensors it makes carry no
    version counter, so autograd cannot check them later. Torch refuses both uses:
    `RuntimeError: Inference tensors cannot be saved for backward. ...` and
    `RuntimeError: Inplace update to inference tensor outside InferenceMode is not
    allowed. ...`. It happens to features, targets and rollouts computed under inference
    mode and then used in a training step.

    ## Example
    ```python
    with torch.inference_mode():
        features = backbone(images)
    loss = criterion(head(features), labels)
    ```

    ## Use instead
    ```python
    with torch.no_grad():
        features = backbone(images)
    loss = criterion(head(features), labels)
    ```

    ## Fix safety
    Safe: `.clone()` outside inference mode, where the tensor is saved or before it is
    changed in place, makes an ordinary tensor of the same values; it is preferred, as it
    changes only the tensor that raises. `torch.no_grad()` instead of `torch.inference_mode()`
    where the tensor was made, also offered, is safe too: it computes the same values without
    recording a graph, and its results are ordinary tensors.
    """

    code = "GG009"
    name = "inference-tensor"
    predicts = "inference_tensor"
    severity = "error"
    summary = "a tensor made in inference mode is saved for backward or changed in place outside it"

    VALID = [
        """
import torch
w = torch.randn(3, requires_grad=True)
with torch.no_grad():
    x = torch.randn(3) * 2
(x * w).sum().backward()
""",
        """
import torch
w = torch.randn(3, requires_grad=True)
with torch.inference_mode():
    x = torch.randn(3) * 2
(x + w).sum().backward()
""",
    ]
    INVALID = [
        """
import torch
w = torch.randn(3, requires_grad=True)
with torch.inference_mode():
    x = torch.randn(3) * 2
loss = (x * w).sum()  # error
""",
        """
import torch
@torch.inference_mode()
def running_mean(xs):
    return torch.stack(xs).mean(0)
mean = running_mean([torch.randn(3), torch.randn(3)])
mean += 1  # error
""",
        """
import torch
with torch.inference_mode():
    cache = torch.ones(2, 4) * 2
torch.nn.init.zeros_(cache)  # error
""",
    ]

    def check(self, facts: Facts):
        for r, _ in first_per_statement(facts, self.raises(facts)):
            tensor = named(facts, r, "a tensor")
            where = ", ".join(_where(facts, o) for o in r.origin)
            if r.in_place:
                what = ("is changed in place outside inference mode: this raises 'Inplace update to inference tensor "
                        "outside InferenceMode is not allowed'")
            else:
                what = ("is saved for backward by an op whose other input requires grad: this raises 'Inference "
                        "tensors cannot be saved for backward'")
            message = f"{tensor} was made in inference mode ({where}) and {what}"
            related = tuple(Related(facts.span(o), "made in inference mode here") for o in r.origin)
            yield self.finding(message, facts.span(r.node), related, fixes.leave_inference_mode(facts, r),
                               facts=facts, entry=r.entry)


def _where(facts: Facts, site) -> str:
    if isinstance(site, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return f"`@inference_mode` def {site.name}, {facts.line(site)}"
    if isinstance(site, (ast.With, ast.AsyncWith)):
        return f"`{facts.text(site.items[0].context_expr)}`, {facts.line(site)}"
    if isinstance(site, ast.Call):  # `self._mode.__enter__()`, in a context manager of the project
        return f"`{facts.text(site)}`, {facts.line(site)}"
    return facts.line(site)
