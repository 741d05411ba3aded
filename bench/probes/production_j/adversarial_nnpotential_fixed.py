# expect: clean
# source: https://github.com/learningmatter-mit/Atomistic-Adversarial-Attacks/issues/1
"""Adversarial sampling of a neural-network interatomic potential.

An ensemble of NN potentials is fit to energies and forces of a 2-D double-well
model surface.  The ensemble disagreement on the forces is then maximised with a
gradient-based attack on the input geometry (Schwalbe-Koda et al.), weighted by
the Boltzmann probability of the predicted energy, to propose new training points
for active learning.
"""
from dataclasses import dataclass
from typing import List

import numpy as np
import torch as ch
import torch.nn as nn


def compute_grad(inputs, output, create_graph=False):
    """Gradient of a (batched) scalar output with respect to the inputs."""
    gradspred, = ch.autograd.grad(
        output, inputs,
        grad_outputs=output.data.new(output.shape).fill_(1),
        create_graph=create_graph,
        retain_graph=True,
    )
    return gradspred


class DoubleWell:
    """E(x, y) = a (x^2 - 1)^2 + b y^2 + c x y ; analytic forces."""

    def __init__(self, a=1.0, b=2.0, c=0.3):
        self.a, self.b, self.c = a, b, c

    def get_energy(self, x):
        return self.a * (x[:, 0] ** 2 - 1) ** 2 + self.b * x[:, 1] ** 2 + self.c * x[:, 0] * x[:, 1]

    def get_forces(self, x):
        fx = -(4 * self.a * x[:, 0] * (x[:, 0] ** 2 - 1) + self.c * x[:, 1])
        fy = -(2 * self.b * x[:, 1] + self.c * x[:, 0])
        return ch.stack([fx, fy], dim=-1)

    def __call__(self, x):
        return x, self.get_energy(x), self.get_forces(x)


class Dense(nn.Linear):
    def __init__(self, in_features, out_features, activation=None, dropout_rate=0.0):
        super().__init__(in_features, out_features)
        self.activation = activation
        self.dropout = nn.Dropout(dropout_rate) if dropout_rate > 0 else None

    def forward(self, x):
        y = super().forward(x)
        if self.dropout is not None:
            y = self.dropout(y)
        if self.activation is not None:
            y = self.activation(y)
        return y


class NnRegressor(nn.Module):
    def __init__(self, input_dim=2, output_dim=1, num_layers=3, layer_dim=32):
        super().__init__()
        layers = [Dense(input_dim, layer_dim, activation=nn.Softplus())]
        layers += [Dense(layer_dim, layer_dim, activation=nn.Softplus()) for _ in range(num_layers - 2)]
        layers += [Dense(layer_dim, output_dim)]
        self.layers = nn.ModuleList(layers)

    def forward(self, x):
        out = x
        for layer in self.layers:
            out = layer(out)
        out = out.squeeze(-1)
        # forces need second derivatives only when they enter a training loss
        forces = -compute_grad(x, out, create_graph=self.training)
        return x, out, forces


class NnEnsemble(nn.Module):
    def __init__(self, networks: List[nn.Module]):
        super().__init__()
        self.networks = nn.ModuleList(networks)

    def forward(self, x):
        results = [net(x) for net in self.networks]
        energies = ch.stack([en for _, en, _ in results], dim=-1)
        forces = ch.stack([f for _, _, f in results], dim=-1)
        return x, energies, forces


class MeanSquareLoss:
    def __init__(self, energy_coef=0.1, forces_coef=1.0):
        self.e_coef, self.f_coef = energy_coef, forces_coef

    def __call__(self, batch, pred):
        _, pe, pf = pred
        te = batch[1][..., None].expand_as(pe)
        tf = batch[2][..., None].expand_as(pf)
        return self.e_coef * ((pe - te) ** 2).mean() + self.f_coef * ((pf - tf) ** 2).mean()


class AdvLoss:
    def __init__(self, train_energies, temperature=1.0):
        self.e = train_energies
        self.temperature = temperature

    def boltzmann_probability(self, e):
        return ch.exp(-e / self.temperature)

    @property
    def partition_fn(self):
        return self.boltzmann_probability(self.e).mean()

    def probability_fn(self, yp):
        return self.boltzmann_probability(yp) / self.partition_fn

    def __call__(self, batch, results):
        x, e, f = results
        loss = -f.var(-1).mean(-1) * self.probability_fn(e.mean(-1))
        return loss.sum()


@dataclass
class AttackConfig:
    n_models: int = 3
    n_train: int = 64
    epochs: int = 30
    attack_epochs: int = 8
    attack_lr: float = 1e-2
    delta_std: float = 0.01
    epsilon: float = 0.5
    seed: int = 0


class EnsembleTrainer:
    def __init__(self, ensemble, loss_fn, lr=3e-3):
        self.ensemble = ensemble
        self.loss_fn = loss_fn
        self.optimizers = {i: ch.optim.Adam(net.parameters(), lr=lr)
                           for i, net in enumerate(ensemble.networks)}

    def fit(self, batch, epochs):
        self.ensemble.train()
        for epoch in range(epochs):
            x = batch[0].clone().requires_grad_(True)
            for opt in self.optimizers.values():
                opt.zero_grad()
            loss = self.loss_fn(batch, self.ensemble(x))
            loss.backward()
            for opt in self.optimizers.values():
                opt.step()
            if epoch % 10 == 0:
                print(f"fit epoch {epoch} loss {loss.item():.4f}")

    def validate(self, batch):
        self.ensemble.eval()
        x = batch[0].clone().requires_grad_(True)
        _, e, f = self.ensemble(x)
        return ((e.mean(-1) - batch[1]) ** 2).mean().item(), f.var(-1).mean().item()


class AdversarialAttacker:
    def __init__(self, model, loss_fn, cfg):
        self.model, self.loss_fn, self.cfg = model, loss_fn, cfg

    def create_delta(self, x):
        delta = ch.zeros_like(x) + self.cfg.delta_std * ch.randn_like(x)
        delta.requires_grad = True
        return delta, ch.optim.Adam([delta], lr=self.cfg.attack_lr)

    def attack_batch(self, batch):
        x_init = batch[0]
        delta, optim = self.create_delta(x_init)
        for epoch in range(self.cfg.attack_epochs):
            optim.zero_grad()
            x = x_init + delta
            results = self.model(x)
            loss = self.loss_fn(batch, results)
            loss.backward()
            optim.step()
            delta.data.clamp_(-self.cfg.epsilon, self.cfg.epsilon)
        return (x_init + delta).detach()


def main():
    cfg = AttackConfig()
    ch.manual_seed(cfg.seed)
    rng = np.random.RandomState(cfg.seed)
    pot = DoubleWell()
    x_train = ch.tensor(rng.uniform(-1.5, 1.5, size=(cfg.n_train, 2)), dtype=ch.float32)
    train = pot(x_train)
    ensemble = NnEnsemble([NnRegressor() for _ in range(cfg.n_models)])
    trainer = EnsembleTrainer(ensemble, MeanSquareLoss())
    trainer.fit(train, cfg.epochs)
    print("val energy mse %.4f, force var %.4f" % trainer.validate(pot(x_train[:16] * 0.9)))

    seeds = pot(x_train[:8])
    ensemble.eval()
    attacker = AdversarialAttacker(ensemble, AdvLoss(train[1]), cfg)
    attacked = attacker.attack_batch(seeds)
    new_points = pot(attacked)
    print("proposed", attacked.shape[0], "points; mean energy", new_points[1].mean().item())


main()
