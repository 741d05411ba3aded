# expect: grad_unused
# source: https://github.com/AvivNavon/nash-mtl/issues/6
"""Multi-task training with Nash-MTL loss weighting (nash-mtl methods/weight_methods.py, condensed).

A shared encoder feeds three task heads (scene class, depth, surface normal) on synthetic
"NYUv2-like" features.  Nash-MTL computes one gradient per task w.r.t. the shared
parameters, solves the bargaining problem G^T G alpha = 1/alpha for the task weights and
back-propagates the weighted loss.  The cvxpy/ECOS solve of the original is replaced by a
small numpy fixed-point iteration.
"""
import argparse
from abc import abstractmethod
from typing import Dict, List, Tuple, Union

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)
np.random.seed(0)


class WeightMethod:
    def __init__(self, n_tasks: int, device: torch.device):
        super().__init__()
        self.n_tasks = n_tasks
        self.device = device

    @abstractmethod
    def get_weighted_loss(self, losses, shared_parameters, **kwargs):
        pass

    def backward(self, losses: torch.Tensor, shared_parameters=None, task_specific_parameters=None,
                 last_shared_parameters=None, representation=None, **kwargs) -> Tuple[torch.Tensor, dict]:
        loss, extra_outputs = self.get_weighted_loss(losses=losses, shared_parameters=shared_parameters, **kwargs)
        loss.backward()
        return loss, extra_outputs

    def parameters(self) -> List[torch.Tensor]:
        return []


class LinearScalarization(WeightMethod):
    def __init__(self, n_tasks, device, task_weights=None):
        super().__init__(n_tasks, device=device)
        self.task_weights = torch.ones(n_tasks) if task_weights is None else torch.tensor(task_weights)

    def get_weighted_loss(self, losses, **kwargs):
        return torch.sum(torch.stack(list(losses)) * self.task_weights), dict(weights=self.task_weights)


class NashMTL(WeightMethod):
    def __init__(self, n_tasks: int, device: torch.device, max_norm: float = 1.0,
                 update_weights_every: int = 1, optim_niter=20):
        super(NashMTL, self).__init__(n_tasks=n_tasks, device=device)
        self.optim_niter = optim_niter
        self.update_weights_every = update_weights_every
        self.max_norm = max_norm
        self.normalization_factor = np.ones((1,))
        self.step = 0.0
        self.prvs_alpha = np.ones(self.n_tasks, dtype=np.float32)

    def _stop_criteria(self, gtg, alpha_t, alpha_prev):
        return (np.linalg.norm(gtg @ alpha_t - 1 / (alpha_t + 1e-10)) < 1e-3) or \
            (np.linalg.norm(alpha_t - alpha_prev) < 1e-6)

    def solve_optimization(self, gtg: np.array):
        """Damped fixed-point iteration for G^T G alpha = 1 / alpha, alpha > 0."""
        alpha_t = self.prvs_alpha.astype(np.float64)
        for _ in range(self.optim_niter):
            alpha_prev = alpha_t
            g_alpha = np.clip(gtg @ alpha_t, 1e-8, None)
            alpha_t = np.clip(0.5 * alpha_t + 0.5 * np.sqrt(alpha_t / g_alpha), 1e-6, 1e6)
            if self._stop_criteria(gtg, alpha_t, alpha_prev):
                break
        self.prvs_alpha = alpha_t.astype(np.float32)
        return self.prvs_alpha

    def get_weighted_loss(self, losses, shared_parameters, **kwargs):
        extra_outputs = dict()
        if (self.step % self.update_weights_every) == 0:
            self.step += 1
            grads = {}
            for i, loss in enumerate(losses):
                g = list(torch.autograd.grad(loss, shared_parameters, retain_graph=True))  # raises
                grads[i] = torch.cat([torch.flatten(grad) for grad in g])
            G = torch.stack(tuple(v for v in grads.values()))
            GTG = torch.mm(G, G.t())
            self.normalization_factor = torch.norm(GTG).detach().cpu().numpy().reshape((1,))
            GTG = GTG / self.normalization_factor.item()
            alpha = torch.from_numpy(self.solve_optimization(GTG.cpu().detach().numpy()))
        else:
            self.step += 1
            alpha = torch.from_numpy(self.prvs_alpha)
        weighted_loss = sum([losses[i] * alpha[i] for i in range(len(alpha))])
        extra_outputs["weights"] = alpha
        return weighted_loss, extra_outputs

    def backward(self, losses, shared_parameters=None, task_specific_parameters=None,
                 last_shared_parameters=None, representation=None, **kwargs):
        loss, extra_outputs = self.get_weighted_loss(losses=losses, shared_parameters=shared_parameters, **kwargs)
        loss.backward()
        # make sure the solution for shared params has norm <= self.eps
        if self.max_norm > 0:
            torch.nn.utils.clip_grad_norm_(shared_parameters, self.max_norm)
        return loss, extra_outputs


METHODS = dict(ls=LinearScalarization, nashmtl=NashMTL)


class WeightMethods:
    def __init__(self, method: str, n_tasks: int, device: torch.device, **kwargs):
        assert method in METHODS, f"unknown method {method}."
        self.method = METHODS[method](n_tasks=n_tasks, device=device, **kwargs)

    def backward(self, losses, **kwargs):
        return self.method.backward(losses, **kwargs)

    def parameters(self):
        return self.method.parameters()


# ------------------------------------------------------------------ model and data
TASKS = ("semantic", "depth", "normal")


class MultiHeadNet(nn.Module):
    """Shared trunk + per-task heads."""

    def __init__(self, in_dim=32, hidden=64, n_classes=5):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.heads = nn.ModuleDict({
            "semantic": nn.Linear(hidden, n_classes),
            "depth": nn.Sequential(nn.Linear(hidden, 1), nn.Softplus()),
            "normal": nn.Linear(hidden, 3),
        })

    def forward(self, x, return_representation=False):
        features = self.encoder(x)
        preds = [self.heads[t](features) for t in TASKS]
        return (preds, features) if return_representation else preds


def calc_loss(x_pred, x_output, task_type):
    if task_type == "semantic":
        return F.cross_entropy(x_pred, x_output)
    if task_type == "depth":
        return torch.abs(x_pred.squeeze(-1) - x_output).mean()
    # normal: 1 - cosine similarity
    return 1 - F.cosine_similarity(F.normalize(x_pred, dim=-1), x_output, dim=-1).mean()


def make_data(n=256, in_dim=32, n_classes=5):
    x = torch.randn(n, in_dim)
    proj = torch.randn(in_dim, n_classes + 4)
    z = x @ proj
    return x, z[:, :n_classes].argmax(-1), F.softplus(z[:, n_classes]), F.normalize(z[:, n_classes + 1:], dim=-1)


def main(args):
    device = torch.device("cpu")
    x, sem, depth, normal = make_data()
    train_idx, test_idx = torch.arange(0, 192), torch.arange(192, 256)
    model = MultiHeadNet().to(device)
    weight_method = WeightMethods(args.method, n_tasks=3, device=device, max_norm=args.max_norm,
                                  update_weights_every=args.update_weights_every)
    optimizer = torch.optim.Adam([dict(params=model.parameters(), lr=args.lr),
                                  dict(params=weight_method.parameters(), lr=args.method_params_lr)])
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=100, gamma=0.5)

    for epoch in range(args.n_epochs):
        model.train()
        perm = train_idx[torch.randperm(len(train_idx))]
        for batch in perm.split(args.batch_size):
            optimizer.zero_grad()
            train_pred, features = model(x[batch], return_representation=True)
            targets = (sem[batch], depth[batch], normal[batch])
            losses = [calc_loss(pred, target, task) for pred, target, task in zip(train_pred, targets, TASKS)]
            loss, extra_outputs = weight_method.backward(
                losses=losses,
                shared_parameters=list(model.parameters()),
                representation=features,
            )
            optimizer.step()
        scheduler.step()

        model.eval()
        with torch.no_grad():
            test_pred = model(x[test_idx])
            acc = (test_pred[0].argmax(-1) == sem[test_idx]).float().mean().item()
            depth_err = calc_loss(test_pred[1], depth[test_idx], "depth").item()
        weights = extra_outputs.get("weights") if extra_outputs else None
        print(f"epoch {epoch}: loss={loss.item():.4f} sem_acc={acc:.3f} depth_abs_err={depth_err:.3f} weights={weights}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser("NYUv2-like multi-task")
    parser.add_argument("--method", default="nashmtl", choices=list(METHODS))
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--method-params-lr", type=float, default=0.025)
    parser.add_argument("--max-norm", type=float, default=1.0)
    parser.add_argument("--update-weights-every", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--n-epochs", type=int, default=3)
    main(parser.parse_args([]))
