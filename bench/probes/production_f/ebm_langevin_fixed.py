# expect: clean
# source: https://github.com/pytorch/examples/pull/779
"""Energy-based model on a 2-D ring of Gaussians, trained with short-run
Langevin dynamics and a persistent replay buffer (Du & Mordatch, 2019).

Negatives are drawn from the buffer (with a small re-initialisation
probability), refined by K steps of SGLD on the current energy, then written
back.  Loss is contrastive divergence plus a small energy-magnitude penalty.
"""
import math
from types import SimpleNamespace

import torch
import torch.nn as nn

cfg = SimpleNamespace(
    seed=2,
    data=SimpleNamespace(n_modes=8, radius=2.0, std=0.15, batch_size=64),
    model=SimpleNamespace(hidden=64, n_layers=3),
    sampler=SimpleNamespace(n_steps=10, step_size=0.05, noise=0.01, clamp=4.0,
                            buffer_size=512, reinit_prob=0.05),
    optim=SimpleNamespace(lr=1e-3, betas=(0.0, 0.999), alpha=0.1),
    train=SimpleNamespace(iters=4, log_every=1),
)


def sample_ring(n, n_modes, radius, std):
    k = torch.randint(0, n_modes, (n,))
    angle = 2 * math.pi * k.float() / n_modes
    centres = torch.stack([radius * torch.cos(angle), radius * torch.sin(angle)], 1)
    return centres + std * torch.randn(n, 2)


class Swish(nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(x)


class EnergyNet(nn.Module):
    def __init__(self, hidden, n_layers):
        super().__init__()
        layers, d = [], 2
        for _ in range(n_layers):
            layers += [nn.Linear(d, hidden), Swish()]
            d = hidden
        layers.append(nn.Linear(d, 1))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x).squeeze(-1)


class ReplayBuffer:
    def __init__(self, size, clamp):
        self.clamp = clamp
        self.storage = (torch.rand(size, 2) * 2 - 1) * clamp

    def _noise(self, n):
        return (torch.rand(n, 2) * 2 - 1) * self.clamp

    def sample(self, n, reinit_prob):
        idx = torch.randint(0, self.storage.size(0), (n,))
        x = self.storage[idx]
        reinit = torch.rand(n) < reinit_prob
        x[reinit] = self._noise(int(reinit.sum()))
        return x, idx

    def push(self, x, idx):
        self.storage[idx] = x.detach()


class LangevinSampler:
    def __init__(self, sc):
        self.n_steps = sc.n_steps
        self.step_size = sc.step_size
        self.noise = sc.noise
        self.clamp = sc.clamp
        self.last_grad_norm = 0.0

    def _energy_grad(self, model, x):
        energy = model(x).sum()
        return torch.autograd.grad(energy, x)[0]

    @torch.no_grad()
    def _update(self, x, grad):
        x.add_(-self.step_size * grad + self.noise * torch.randn_like(x))
        x.clamp_(-self.clamp, self.clamp)

    def run(self, model, x_init):
        was_training = model.training
        model.eval()
        x = x_init.clone().requires_grad_(True)
        for _ in range(self.n_steps):
            grad = self._energy_grad(model, x)
            self.last_grad_norm = grad.norm(dim=-1).mean().item()
            self._update(x, grad)
        model.train(was_training)
        return x.detach()


class EBMTrainer:
    def __init__(self, cfg):
        torch.manual_seed(cfg.seed)
        self.cfg = cfg
        self.model = EnergyNet(cfg.model.hidden, cfg.model.n_layers)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=cfg.optim.lr, betas=cfg.optim.betas)
        self.buffer = ReplayBuffer(cfg.sampler.buffer_size, cfg.sampler.clamp)
        self.sampler = LangevinSampler(cfg.sampler)

    def step(self):
        d = self.cfg.data
        x_pos = sample_ring(d.batch_size, d.n_modes, d.radius, d.std)
        x_init, idx = self.buffer.sample(d.batch_size, self.cfg.sampler.reinit_prob)
        x_neg = self.sampler.run(self.model, x_init)
        self.buffer.push(x_neg, idx)

        e_pos = self.model(x_pos)
        e_neg = self.model(x_neg)
        cd = e_pos.mean() - e_neg.mean()
        reg = self.cfg.optim.alpha * (e_pos ** 2 + e_neg ** 2).mean()
        loss = cd + reg
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return {"loss": loss.item(), "cd": cd.item(), "e_pos": e_pos.mean().item(),
                "e_neg": e_neg.mean().item(), "grad": self.sampler.last_grad_norm}

    @torch.no_grad()
    def mode_coverage(self, x):
        d = self.cfg.data
        angles = torch.atan2(x[:, 1], x[:, 0]) % (2 * math.pi)
        k = torch.round(angles / (2 * math.pi / d.n_modes)).long() % d.n_modes
        near = ((x.norm(dim=1) - d.radius).abs() < 3 * d.std)
        return len(set(k[near].tolist())) / d.n_modes

    def train(self):
        for it in range(1, self.cfg.train.iters + 1):
            stats = self.step()
            if it % self.cfg.train.log_every == 0:
                print(f"it {it:3d} " + " ".join(f"{k} {v:+.4f}" for k, v in stats.items()))
        x_init, _ = self.buffer.sample(256, 0.0)
        print("mode coverage %.2f" % self.mode_coverage(self.sampler.run(self.model, x_init)))


if __name__ == "__main__":
    EBMTrainer(cfg).train()
