# expect: clean
# source: https://github.com/pytorch/pytorch/pull/92278
"""Deep ensemble for 1-D regression, vectorised with torch.func.vmap.

The members' parameters are stacked along a new leading dimension and the
stacked tensors are optimised directly, as in the "model ensembling" recipe.
``stack_module_state`` below returns the stacked tensors as new leaves.
"""
import copy
from dataclasses import dataclass
from typing import Dict, Sequence, Tuple

import torch
import torch.nn as nn
from torch.func import functional_call, vmap

torch.manual_seed(0)


def construct_stacked_leaf(tensors, name: str) -> torch.Tensor:
    all_requires_grad = all(t.requires_grad for t in tensors)
    none_requires_grad = all(not t.requires_grad for t in tensors)
    if not all_requires_grad and not none_requires_grad:
        raise RuntimeError(f"Expected {name} from each model to have the same .requires_grad")
    result = torch.stack(tensors)
    if all_requires_grad:
        result = result.detach().requires_grad_()
    return result


def stack_module_state(models: Sequence[nn.Module]) -> Tuple[Dict[str, torch.Tensor], Dict[str, torch.Tensor]]:
    """Prepares a list of torch.nn.Modules for ensembling with vmap.

    Given a list of ``M`` ``nn.Modules`` of the same class, stacks all of their
    parameters and buffers together, indexed by name.
    """
    if len(models) == 0:
        raise RuntimeError("stack_module_state: Expected at least one model, got 0.")
    if not (all(m.training for m in models) or all(not m.training for m in models)):
        raise RuntimeError("stack_module_state: Expected all models to have the same training/eval mode.")
    model0_typ = type(models[0])
    if not all(type(m) is model0_typ for m in models):
        raise RuntimeError("stack_module_state: Expected all models to be of the same class.")
    all_params = [dict(model.named_parameters()) for model in models]
    params = {k: construct_stacked_leaf(tuple(params[k] for params in all_params), k) for k in all_params[0]}
    all_buffers = [dict(model.named_buffers()) for model in models]
    buffers = {k: construct_stacked_leaf(tuple(buffers[k] for buffers in all_buffers), k) for k in all_buffers[0]}
    return params, buffers


@dataclass
class EnsembleConfig:
    num_members: int = 5
    hidden: int = 32
    lr: float = 3e-3
    weight_decay: float = 1e-4
    epochs: int = 150
    batch_size: int = 64


class MLP(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(1, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())
        self.mean_head = nn.Linear(hidden, 1)
        self.logvar_head = nn.Linear(hidden, 1)

    def forward(self, x):
        h = self.net(x)
        return self.mean_head(h), self.logvar_head(h).clamp(-6.0, 4.0)


class DeepEnsemble:
    """M independently initialised MLPs evaluated in one vmapped call."""

    def __init__(self, cfg: EnsembleConfig):
        self.cfg = cfg
        members = [MLP(cfg.hidden) for _ in range(cfg.num_members)]
        self.params, self.buffers = stack_module_state(members)
        # a stateless copy of the architecture; the weights come from self.params
        self.base_model = copy.deepcopy(members[0]).to("meta")

    def _call_single(self, params, buffers, x):
        return functional_call(self.base_model, (params, buffers), (x,))

    def __call__(self, x):
        return vmap(self._call_single, in_dims=(0, 0, None))(self.params, self.buffers, x)

    def parameters(self):
        return list(self.params.values())

    def predict(self, x):
        with torch.no_grad():
            means, logvars = self(x)
        mean = means.mean(0)
        var = (logvars.exp() + means.pow(2)).mean(0) - mean.pow(2)
        return mean, var


def gaussian_nll(mean, logvar, target):
    return 0.5 * (logvar + (target - mean).pow(2) / logvar.exp()).mean()


class EnsembleTrainer:
    def __init__(self, ensemble: DeepEnsemble, cfg: EnsembleConfig):
        self.ensemble = ensemble
        self.cfg = cfg
        self.optimizer = self.configure_optimizer()

    def configure_optimizer(self):
        return torch.optim.AdamW(self.ensemble.parameters(), lr=self.cfg.lr,
                                 weight_decay=self.cfg.weight_decay)

    def train_step(self, x, y):
        self.optimizer.zero_grad()
        means, logvars = self.ensemble(x)
        # every member sees the same batch; the NLL is summed over members
        loss = sum(gaussian_nll(m, lv, y) for m, lv in zip(means, logvars))
        loss.backward()
        self.optimizer.step()
        return loss.item() / self.cfg.num_members

    def fit(self, x, y):
        n = x.shape[0]
        for epoch in range(self.cfg.epochs):
            perm = torch.randperm(n)
            total = 0.0
            for start in range(0, n, self.cfg.batch_size):
                idx = perm[start:start + self.cfg.batch_size]
                total += self.train_step(x[idx], y[idx]) * len(idx)
            if epoch % 50 == 0:
                print(f"epoch {epoch:3d}  nll {total / n:.4f}")


def make_data(n=256):
    x = torch.rand(n, 1) * 8 - 4
    noise = 0.1 + 0.2 * (x > 0).float()
    y = torch.sin(x) + noise * torch.randn_like(x)
    return x, y


cfg = EnsembleConfig()
x_train, y_train = make_data()
ensemble = DeepEnsemble(cfg)
trainer = EnsembleTrainer(ensemble, cfg)
trainer.fit(x_train, y_train)

x_test = torch.linspace(-6, 6, 7).unsqueeze(1)
mean, var = ensemble.predict(x_test)
for xi, mi, vi in zip(x_test.squeeze(1), mean.squeeze(1), var.squeeze(1)):
    print(f"x={xi:+.1f}  mean={mi:+.3f}  std={vi.sqrt():.3f}")
