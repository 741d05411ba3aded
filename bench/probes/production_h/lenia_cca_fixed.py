# expect: clean
# source: https://github.com/riveSunder/yuca/issues/82
"""Continuous cellular automaton (Lenia-style CCA) with Gaussian-ring
neighbourhood kernels and Gaussian growth functions.

Stage 1 tunes growth parameters and the time step by backpropagating through
a short rollout; stage 2 refines the same rule with a simple evolution
strategy that writes candidate parameter vectors back into the model."""
import time
from functools import reduce

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
np.random.seed(0)

CA_CONFIG = {
    "neighborhood_kernel_config": {"radius": 5, "parameters": [0.5, 0.15, 1.0]},
    "genesis_config": {"mu": 0.15, "sigma": 0.015},
    "persistence_config": {"mu": 0.15, "sigma": 0.03},
    "dt": 0.1,
    "grid": 32,
}
TRAIN = {"grad_steps": 6, "rollout": 12, "lr": 1e-2, "es_generations": 3, "es_pop": 4, "es_sigma": 0.01,
         "target_mass": 0.12}


def get_gaussian_mixture_kernel(radius, parameters):
    xx, yy = np.meshgrid(np.arange(-radius, radius + 1), np.arange(-radius, radius + 1))
    rr = np.sqrt(xx ** 2 + yy ** 2) / radius
    kernel = np.zeros_like(rr)
    for mu, sigma, amp in zip(parameters[0::3], parameters[1::3], parameters[2::3]):
        kernel += amp * np.exp(-((rr - mu) ** 2) / (2 * sigma ** 2))
    kernel[rr > 1.0] = 0.0
    kernel /= kernel.sum()
    return torch.tensor(kernel, dtype=torch.float32).view(1, 1, 2 * radius + 1, 2 * radius + 1)


class GaussianGrowth(nn.Module):
    def __init__(self, mu, sigma):
        super().__init__()
        self.mu = nn.Parameter(torch.tensor(mu))
        self.sigma = nn.Parameter(torch.tensor(sigma))

    def forward(self, x):
        return 2 * torch.exp(-((x - self.mu) ** 2) / (2 * self.sigma ** 2)) - 1


class CCA(nn.Module):
    def __init__(self, ca_config, use_grad=True, device="cpu"):
        super().__init__()
        self.config = ca_config
        self.my_device = device
        self.use_grad = use_grad
        self.kernel_radius = ca_config["neighborhood_kernel_config"]["radius"]
        self.kernel_params = np.array(ca_config["neighborhood_kernel_config"]["parameters"])
        self.genesis_fns = nn.ModuleList([GaussianGrowth(**ca_config["genesis_config"])])
        self.persistence_fns = nn.ModuleList([GaussianGrowth(**ca_config["persistence_config"])])
        self.id_layer = nn.Conv2d(1, 1, 1, bias=False)
        self.weights_layer = nn.Conv2d(2, 1, 1, bias=False)
        self.initialize_id_layer()
        self.initialize_weight_layer()
        self.add_neighborhood_kernel(get_gaussian_mixture_kernel(self.kernel_radius, self.kernel_params))
        self.initialize_neighborhood_layer()
        self.include_parameters()

    def initialize_id_layer(self):
        self.id_layer.weight.data.fill_(1.0)
        self.id_layer.weight.requires_grad = False

    def initialize_weight_layer(self):
        self.weights_layer.weight.data[:] = torch.tensor([1.0, 1.0]).view(1, 2, 1, 1)
        self.weights_layer.weight.requires_grad = False

    def add_neighborhood_kernel(self, kernel):
        self.neighborhood_kernel = kernel

    def initialize_neighborhood_layer(self):
        k = self.neighborhood_kernel.shape[-1]
        self.neighborhood_layer = nn.Conv2d(1, 1, k, padding=k // 2, padding_mode="circular", bias=False)
        self.neighborhood_layer.weight.data = self.neighborhood_kernel.clone()
        self.neighborhood_layer.weight.requires_grad = False

    def include_parameters(self):
        self.dt = nn.Parameter(torch.tensor(float(self.config["dt"])), requires_grad=self.use_grad)
        self.growth_gain = nn.Parameter(torch.ones(1), requires_grad=self.use_grad)

    def set_kernel_radius(self, radius):
        self.kernel_radius = radius
        self.add_neighborhood_kernel(get_gaussian_mixture_kernel(radius, self.kernel_params))
        self.initialize_neighborhood_layer()

    def alive_mask(self, universe):
        return (F.max_pool2d(universe, 3, 1, 1) > 0.1).float()

    def forward(self, universe):
        nbhd = self.neighborhood_layer(universe)
        genesis = sum(fn(nbhd) for fn in self.genesis_fns) / len(self.genesis_fns)
        persistence = sum(fn(nbhd) for fn in self.persistence_fns) / len(self.persistence_fns)
        alive = self.alive_mask(universe)
        growth = self.weights_layer(torch.cat([genesis * (1 - alive), persistence * alive], 1))
        return torch.clamp(self.id_layer(universe) + self.dt * self.growth_gain * growth, 0.0, 1.0)

    def no_grad(self):
        self.use_grad = False
        for p_name, p_param in self.named_parameters():
            p_param.requires_grad = False
        for hh, param in enumerate(self.weights_layer.parameters()):
            param.requires_grad = False
        for ii, genesis_fn in enumerate(self.genesis_fns):
            for jj, param in enumerate(genesis_fn.parameters()):
                param.requires_grad = False
        for kk, persistence_fn in enumerate(self.persistence_fns):
            for ll, param in enumerate(persistence_fn.parameters()):
                param.requires_grad = False

    def to_device(self, my_device):
        self.no_grad()
        self.to(my_device)
        self.my_device = my_device
        self.id_layer.to(my_device)
        self.neighborhood_layer.to(my_device)
        self.weights_layer.to(my_device)
        for name, param in self.named_parameters():
            if len(param.shape) == 0:
                param = param.reshape(1)
            param[:] = param.to(my_device)

    def get_params(self):
        params = np.array([])
        for fn in list(self.genesis_fns) + list(self.persistence_fns):
            for _, param in fn.named_parameters():
                params = np.append(params, param.detach().cpu().numpy().ravel())
        return np.append(params, self.kernel_params)

    def set_params(self, params):
        self.no_grad()
        param_start = 0
        for fn in list(self.genesis_fns) + list(self.persistence_fns):
            for _, param in fn.named_parameters():
                if not len(param.shape):
                    param = param.reshape(1)
                param_stop = param_start + reduce(lambda x, y: x * y, param.shape)
                param[:] = nn.Parameter(torch.tensor(params[param_start:param_stop].reshape(param.shape),
                                                     dtype=torch.float32), requires_grad=self.use_grad)
                param_start = param_stop
        self.kernel_params = params[param_start:param_start + self.kernel_params.shape[0]]
        self.add_neighborhood_kernel(get_gaussian_mixture_kernel(self.kernel_radius, self.kernel_params))
        self.initialize_neighborhood_layer()
        self.to_device(self.my_device)


def seed_universe(n, gen):
    u = torch.zeros(1, 1, n, n)
    lo, hi = n // 3, 2 * n // 3
    u[:, :, lo:hi, lo:hi] = torch.rand(1, 1, hi - lo, hi - lo, generator=gen)
    return u


def rollout_loss(ca, steps, target, gen):
    u = seed_universe(CA_CONFIG["grid"], gen)
    masses = []
    for _ in range(steps):
        u = ca(u)
        masses.append(u.mean())
    masses = torch.stack(masses)
    return ((masses - target) ** 2).mean() + 0.1 * masses.diff().abs().mean(), masses[-1].item()


def fitness(ca, gen):
    with torch.no_grad():
        loss, mass = rollout_loss(ca, TRAIN["rollout"], TRAIN["target_mass"], gen)
    return -loss.item(), mass


def main():
    t0 = time.time()
    gen = torch.Generator().manual_seed(7)
    ca = CCA(CA_CONFIG, use_grad=True)
    ca.set_kernel_radius(4)
    trainable = [p for p in ca.parameters() if p.requires_grad]
    opt = torch.optim.Adam(trainable, lr=TRAIN["lr"])
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
    for step in range(TRAIN["grad_steps"]):
        loss, mass = rollout_loss(ca, TRAIN["rollout"], TRAIN["target_mass"], gen)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        with torch.no_grad():
            for fn in list(ca.genesis_fns) + list(ca.persistence_fns):
                fn.sigma.clamp_(min=1e-3)
        print(f"grad step {step} loss {loss.item():.5f} mass {mass:.3f} dt {ca.dt.item():.3f}")
    rng = np.random.default_rng(0)
    elite = ca.get_params()
    best_fit, _ = fitness(ca, gen)
    for generation in range(TRAIN["es_generations"]):
        pop = [elite + TRAIN["es_sigma"] * rng.standard_normal(elite.shape) for _ in range(TRAIN["es_pop"])]
        scores = []
        for cand in pop:
            ca.set_params(cand)
            scores.append(fitness(ca, gen)[0])
        idx = int(np.argmax(scores))
        if scores[idx] > best_fit:
            best_fit, elite = scores[idx], pop[idx]
        print(f"generation {generation} best fitness {best_fit:.5f}")
    ca.set_params(elite)
    print(f"final fitness {fitness(ca, gen)[0]:.5f} ({time.time() - t0:.1f}s)")


if __name__ == "__main__":
    main()
