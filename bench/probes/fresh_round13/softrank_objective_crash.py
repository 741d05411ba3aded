# expect: numpy_requires_grad
# source: https://github.com/google-research/fast-soft-sort/issues/20
"""Custom boosting objective built on a NumPy-backed soft-rank operator.

The soft-rank op is wrapped as a torch.autograd.Function (as in the
fast-soft-sort pytorch_ops wrapper) and a Spearman-style ranking loss is
used as a gradient-boosting objective that needs first and second
derivatives with respect to the raw predictions.
"""
import numpy as np
import torch


class SoftRankNumpy:
    """Tiny L2-regularised soft rank (isotonic-free approximation)."""

    def __init__(self, values, regularization_strength=1.0):
        self.values = values
        self.eps = regularization_strength

    def compute(self):
        z = self.values / self.eps
        diff = z[:, None] - z[None, :]
        self.sig = 1.0 / (1.0 + np.exp(-diff))
        return 0.5 + self.sig.sum(axis=1)

    def vjp(self, grad):
        jac = self.sig * (1.0 - self.sig) / self.eps
        jac_full = np.diag(jac.sum(axis=1)) - jac
        return grad @ jac_full.T


class NumpyOpWrapper(torch.autograd.Function):
    @staticmethod
    def forward(ctx, values):
        obj = SoftRankNumpy(values.detach().cpu().numpy())
        ctx.numpy_obj = obj
        return torch.from_numpy(obj.compute()).to(values.device)

    @staticmethod
    def backward(ctx, grad_output):
        return torch.from_numpy(ctx.numpy_obj.vjp(grad_output.cpu().numpy())).to(grad_output.device)  # raises


def soft_rank(values):
    return torch.stack([NumpyOpWrapper.apply(v) for v in torch.unbind(values)])


def spearman_objective(preds, target_ranks):
    """Return (grad, hess) of the soft Spearman loss, as a booster expects."""
    preds = torch.tensor(preds, dtype=torch.float64, requires_grad=True)
    ranks = soft_rank(preds.view(1, -1)).view(-1)
    loss = ((ranks - target_ranks) ** 2).sum()
    grad, = torch.autograd.grad(loss, preds, create_graph=True)
    hess, = torch.autograd.grad(grad.sum(), preds)
    return grad.detach().numpy(), hess.numpy()


rng = np.random.RandomState(0)
raw_preds = rng.randn(12)
target = torch.from_numpy(np.argsort(np.argsort(rng.randn(12))) + 1.0)
g, h = spearman_objective(raw_preds, target)
print("grad norm", np.linalg.norm(g), "hess mean", h.mean())
