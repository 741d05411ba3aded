# expect: requires_grad_nonleaf
# source: https://github.com/lucidrains/ema-pytorch/issues/20
"""Energy-based model trained with short-run Langevin dynamics and an EMA copy.

The energy network uses spectrally normalised linear layers (a forward
pre-hook recomputes the normalised weight from `weight_orig` with one power
iteration). Negatives come from a replay buffer refined by Langevin steps;
the loss is the contrastive-divergence energy gap plus an energy-magnitude
regulariser. An exponential-moving-average wrapper in the style of
ema-pytorch keeps a slow copy of the energy net for evaluation; the EMA copy
is built from the model factory and warmed up with one forward pass before
being wrapped.
"""
import copy
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F


class SpectralNorm:
    def __init__(self, name="weight", n_power_iterations=1):
        self.name = name
        self.n_power_iterations = n_power_iterations

    def compute_weight(self, module):
        weight = getattr(module, self.name + "_orig")
        u = getattr(module, self.name + "_u")
        weight_mat = weight.reshape(weight.size(0), -1)
        with torch.no_grad():
            for _ in range(self.n_power_iterations):
                v = F.normalize(weight_mat.t() @ u, dim=0)
                u = F.normalize(weight_mat @ v, dim=0)
        sigma = u @ weight_mat @ v
        return weight / sigma, u

    @staticmethod
    def apply(module, name="weight"):
        fn = SpectralNorm(name)
        weight = module._parameters[name]
        del module._parameters[name]
        module.register_parameter(name + "_orig", nn.Parameter(weight.detach().clone()))
        module.register_buffer(name + "_u", F.normalize(torch.randn(weight.size(0)), dim=0))
        module.register_forward_pre_hook(fn)
        return fn

    def __call__(self, module, inputs):
        weight_sn, u = self.compute_weight(module)
        module._parameters[self.name] = weight_sn
        setattr(module, self.name + "_u", u)


def spectral_norm(module):
    SpectralNorm.apply(module)
    return module


class EnergyNet(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.l1 = spectral_norm(nn.Linear(dim, hidden))
        self.l2 = spectral_norm(nn.Linear(hidden, hidden))
        self.out = nn.Linear(hidden, 1)

    def forward(self, x):
        h = F.silu(self.l1(x))
        h = F.silu(self.l2(h))
        return self.out(h).squeeze(-1)


class EMA(nn.Module):
    def __init__(self, model, ema_model=None, beta=0.99, update_after_step=5, update_every=1):
        super().__init__()
        self.beta = beta
        self.online_model = [model]
        self.ema_model = ema_model
        if self.ema_model is None:
            self.ema_model = copy.deepcopy(model)
        self.ema_model.requires_grad_(False)  # raises
        self.update_after_step = update_after_step
        self.update_every = update_every
        self.register_buffer("step", torch.tensor(0))

    def leaf_params(self, module):
        return [p for n, p in module.named_parameters() if n.endswith("_orig") or "out" in n]

    @torch.no_grad()
    def copy_params_from_model_to_ema(self):
        for ma, mo in zip(self.leaf_params(self.ema_model), self.leaf_params(self.online_model[0])):
            ma.copy_(mo)

    @torch.no_grad()
    def update(self):
        step = int(self.step)
        self.step += 1
        if step % self.update_every:
            return
        if step <= self.update_after_step:
            self.copy_params_from_model_to_ema()
            return
        for ma, mo in zip(self.leaf_params(self.ema_model), self.leaf_params(self.online_model[0])):
            ma.lerp_(mo, 1.0 - self.beta)

    def __call__(self, *args, **kwargs):
        return self.ema_model(*args, **kwargs)


class ReplayBuffer:
    def __init__(self, size, dim, reinit_prob=0.05):
        self.buffer = torch.rand(size, dim) * 4 - 2
        self.reinit_prob = reinit_prob

    def sample(self, n):
        idx = torch.randint(0, self.buffer.size(0), (n,))
        x = self.buffer[idx].clone()
        reinit = torch.rand(n) < self.reinit_prob
        x[reinit] = torch.rand(int(reinit.sum()), x.size(1)) * 4 - 2
        return x, idx

    def push(self, x, idx):
        self.buffer[idx] = x.detach()


def langevin(energy_fn, x, steps, step_size, noise):
    x = x.clone().requires_grad_(True)
    for _ in range(steps):
        grad, = torch.autograd.grad(energy_fn(x).sum(), x)
        x = (x - step_size * grad + noise * torch.randn_like(x)).detach().requires_grad_(True)
    return x.detach()


def sample_data(n, gen):
    centers = torch.tensor([[1.0, 1.0], [-1.0, -1.0], [1.0, -1.0]])
    return centers[torch.randint(0, 3, (n,), generator=gen)] + 0.1 * torch.randn(n, 2, generator=gen)


class EBMTrainer:
    def __init__(self, cfg, make_model):
        self.cfg = cfg
        self.model = make_model()
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.lr, betas=(0.0, 0.999))
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=cfg.lr_step, gamma=0.5)
        ema_model = make_model()
        ema_model(torch.zeros(1, cfg.dim))
        self.ema = EMA(self.model, ema_model=ema_model, beta=cfg.ema_beta)
        self.buffer = ReplayBuffer(cfg.buffer_size, cfg.dim)

    def train_step(self, pos):
        neg, idx = self.buffer.sample(pos.size(0))
        self.model.eval()
        neg = langevin(self.model, neg, self.cfg.ld_steps, self.cfg.ld_step_size, self.cfg.ld_noise)
        self.buffer.push(neg, idx)
        self.model.train()
        pos_e, neg_e = self.model(pos), self.model(neg)
        loss = (pos_e - neg_e).mean() + self.cfg.alpha * (pos_e ** 2 + neg_e ** 2).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.ema.update()
        return loss.item()

    @torch.no_grad()
    def evaluate(self, pos):
        noise = torch.rand_like(pos) * 4 - 2
        return (self.ema(noise).mean() - self.ema(pos).mean()).item()

    def fit(self, gen):
        for it in range(self.cfg.iters):
            loss = self.train_step(sample_data(self.cfg.batch_size, gen))
            if (it + 1) % self.cfg.log_every == 0:
                self.scheduler.step()
                gap = self.evaluate(sample_data(256, gen))
                print("iter %d loss %.4f ema energy gap %.4f" % (it + 1, loss, gap))


def main():
    cfg = SimpleNamespace(dim=2, hidden=32, lr=1e-3, lr_step=2, ema_beta=0.99, buffer_size=512, batch_size=64,
                          ld_steps=10, ld_step_size=0.05, ld_noise=0.005, alpha=0.1, iters=30, log_every=10)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    trainer = EBMTrainer(cfg, lambda: EnergyNet(cfg.dim, cfg.hidden))
    trainer.fit(gen)


if __name__ == "__main__":
    main()
