# expect: grad_unused
# source: https://github.com/Harry24k/adversarial-attacks-pytorch/issues/170
"""Robustness evaluation of a hybrid quantum-classical CNN (QCNN) with a
torchattacks-style PGD attack.

The first layer is a "quanvolution": every 2x2 image patch is angle-encoded
into a 4-qubit register, passed through a fixed random circuit and measured,
giving 4 feature channels.  The circuit is simulated with a small state-vector
simulator.  After a short clean training run the model is attacked with FGSM
and PGD through an Attack base class modelled on torchattacks.
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

N_QUBITS = 4
CFG = {"seed": 0, "image_size": 8, "n_train": 64, "n_test": 16, "epochs": 2, "lr": 5e-3,
       "attack": {"eps": 8 / 255, "alpha": 2 / 255, "steps": 3, "random_start": True,
                  "names": ["PGD", "FGSM"]}}


def random_circuit_unitary(n_qubits, seed):
    """Real orthogonal stand-in for a fixed random layer of rotations + CNOTs."""
    rng = np.random.RandomState(seed)
    q, _ = np.linalg.qr(rng.normal(size=(2 ** n_qubits, 2 ** n_qubits)))
    return q.astype(np.float32)


def z_signs(n_qubits):
    states = np.arange(2 ** n_qubits)
    return np.stack([1 - 2 * ((states >> (n_qubits - 1 - q)) & 1) for q in range(n_qubits)], 1).astype(np.float32)


class QuantumCircuitSimulator:
    """State-vector simulation of angle encoding -> fixed circuit -> <Z_i>."""

    def __init__(self, n_qubits, seed):
        self.n_qubits = n_qubits
        self.unitary = random_circuit_unitary(n_qubits, seed)
        self.signs = z_signs(n_qubits)

    def run(self, angles):
        # angles: [n_patches, n_qubits] numpy array
        state = np.ones((angles.shape[0], 1), dtype=np.float32)
        for q in range(self.n_qubits):
            amp = np.stack([np.cos(angles[:, q] / 2), np.sin(angles[:, q] / 2)], 1)
            state = (state[:, :, None] * amp[:, None, :]).reshape(angles.shape[0], -1)
        state = state @ self.unitary.T
        probs = state ** 2
        return probs @ self.signs


class Quanvolution(nn.Module):
    def __init__(self, seed=0):
        super().__init__()
        self.sim = QuantumCircuitSimulator(N_QUBITS, seed)

    def forward(self, x):
        b, _, h, w = x.shape
        patches = F.unfold(x, kernel_size=2, stride=2)  # [B, 4, L]
        L = patches.shape[-1]
        angles = math.pi * patches.transpose(1, 2).reshape(-1, N_QUBITS)
        q_results = self.sim.run(angles.detach().cpu().numpy())
        out = torch.tensor(q_results, dtype=torch.float32).view(b, L, N_QUBITS).transpose(1, 2)
        return out.reshape(b, N_QUBITS, h // 2, w // 2)


class QCNN(nn.Module):
    def __init__(self, num_classes=2):
        super().__init__()
        self.quanv = Quanvolution()
        self.conv = nn.Conv2d(N_QUBITS, 8, 3, padding=1)
        self.head = nn.Linear(8 * 4 * 4, num_classes)

    def forward(self, x):
        x = F.relu(self.conv(self.quanv(x)))
        return self.head(x.flatten(1))


ATTACKS = {}


def register_attack(cls):
    ATTACKS[cls.__name__] = cls
    return cls


class Attack:
    """Minimal torchattacks-like base class."""

    def __init__(self, name, model):
        self.attack = name
        self.model = model
        self.device = next(model.parameters()).device
        self._normalization_applied = False
        self._model_training = False

    def get_logits(self, inputs):
        return self.model(inputs)

    def _check_inputs(self, inputs):
        if torch.max(inputs) > 1 or torch.min(inputs) < 0:
            raise ValueError("Input must have a range [0, 1]")

    def __call__(self, inputs, labels):
        self._check_inputs(inputs)
        given_training = self.model.training
        self.model.eval()
        adv_inputs = self.forward(inputs, labels)
        if given_training:
            self.model.train()
        return adv_inputs

    def forward(self, inputs, labels):
        raise NotImplementedError


@register_attack
class FGSM(Attack):
    def __init__(self, model, eps=8 / 255):
        super().__init__("FGSM", model)
        self.eps = eps

    def forward(self, images, labels):
        images = images.clone().detach()
        images.requires_grad = True
        cost = F.cross_entropy(self.get_logits(images), labels)
        grad = torch.autograd.grad(cost, images, retain_graph=False, create_graph=False)[0]
        return torch.clamp(images + self.eps * grad.sign(), 0, 1).detach()


@register_attack
class PGD(Attack):
    def __init__(self, model, eps=8 / 255, alpha=2 / 255, steps=10, random_start=True):
        super().__init__("PGD", model)
        self.eps, self.alpha, self.steps, self.random_start = eps, alpha, steps, random_start

    def forward(self, images, labels):
        images = images.clone().detach().to(self.device)
        labels = labels.clone().detach().to(self.device)
        loss = nn.CrossEntropyLoss()
        adv_images = images.clone().detach()
        if self.random_start:
            adv_images = adv_images + torch.empty_like(adv_images).uniform_(-self.eps, self.eps)
            adv_images = torch.clamp(adv_images, min=0, max=1).detach()
        for _ in range(self.steps):
            adv_images.requires_grad = True
            outputs = self.get_logits(adv_images)
            cost = loss(outputs, labels)
            grad = torch.autograd.grad(cost, adv_images, retain_graph=False, create_graph=False)[0]  # raises
            adv_images = adv_images.detach() + self.alpha * grad.sign()
            delta = torch.clamp(adv_images - images, min=-self.eps, max=self.eps)
            adv_images = torch.clamp(images + delta, min=0, max=1).detach()
        return adv_images


def make_data(n, size, gen):
    x = torch.rand(n, 1, size, size, generator=gen) * 0.3
    y = torch.randint(0, 2, (n,), generator=gen)
    x[y == 1, :, : size // 2, :] += 0.5
    return x.clamp(0, 1), y


def accuracy(model, x, y):
    model.eval()
    with torch.no_grad():
        return (model(x).argmax(1) == y).float().mean().item()


def train(model, x, y, cfg):
    opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"])
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=cfg["epochs"])
    for epoch in range(cfg["epochs"]):
        model.train()
        for xb, yb in zip(x.split(16), y.split(16)):
            loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
        sched.step()
        print(f"epoch {epoch} clean acc {accuracy(model, x, y):.3f}")


def build_attack(name, model, atk_cfg):
    if name == "FGSM":
        return ATTACKS[name](model, eps=atk_cfg["eps"])
    return ATTACKS[name](model, eps=atk_cfg["eps"], alpha=atk_cfg["alpha"], steps=atk_cfg["steps"],
                         random_start=atk_cfg["random_start"])


def perform_attack(model, images, labels, cfg):
    atk_cfg = cfg["attack"]
    results = {"clean": accuracy(model, images, labels)}
    for name in atk_cfg["names"]:
        attack = build_attack(name, model, atk_cfg)
        adv_images = attack(images, labels)
        results[name.lower()] = accuracy(model, adv_images, labels)
        print(f"{name}: max perturbation {(adv_images - images).abs().max().item():.4f}")
    return results


def main():
    torch.manual_seed(CFG["seed"])
    gen = torch.Generator().manual_seed(CFG["seed"])
    x_train, y_train = make_data(CFG["n_train"], CFG["image_size"], gen)
    x_test, y_test = make_data(CFG["n_test"], CFG["image_size"], gen)
    model = QCNN()
    train(model, x_train, y_train, CFG)
    print(perform_attack(model, x_test, y_test, CFG))


if __name__ == "__main__":
    main()
