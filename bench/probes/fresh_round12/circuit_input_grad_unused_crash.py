# expect: grad_unused
# source: https://github.com/april-tools/cirkit/issues/289
"""'Learning a circuit' notebook in the style of cirkit: a symbolic circuit
template for image data (input units over pixels, CP sum-product layers over a
quad-tree of pixel regions) is compiled to a torch module, trained by maximum
likelihood on synthetic 4x4 images, and then differentiated with respect to
the input batch to obtain per-pixel sensitivity maps of the log-likelihood."""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn


@dataclass
class CircuitConfig:
    image_shape: tuple = (1, 4, 4)
    num_input_units: int = 4
    num_sum_units: int = 4
    input_layer: str = "categorical"     # "categorical" | "gaussian"
    num_categories: int = 256
    batch_size: int = 16
    num_epochs: int = 3
    lr: float = 0.05
    seed: int = 0


# ------------------------------------------------------------------ input layers
class CategoricalLayer(nn.Module):
    def __init__(self, num_variables, num_units, num_categories):
        super().__init__()
        self.num_categories = num_categories
        self.logits = nn.Parameter(0.01 * torch.randn(num_variables, num_units, num_categories))

    def forward(self, x):                        # x: (B, V) pixel intensities in [0, 255]
        idx = x.long().clamp(0, self.num_categories - 1)
        logp = torch.log_softmax(self.logits, dim=-1)               # (V, K, C)
        v = torch.arange(idx.shape[1])
        return logp[v.unsqueeze(0), :, idx]                         # (B, V, K)


class GaussianLayer(nn.Module):
    def __init__(self, num_variables, num_units):
        super().__init__()
        self.mean = nn.Parameter(torch.rand(num_variables, num_units) * 255.0)
        self.log_std = nn.Parameter(torch.full((num_variables, num_units), math.log(64.0)))

    def forward(self, x):
        x = x.unsqueeze(-1)
        std = self.log_std.exp()
        return -0.5 * ((x - self.mean) / std) ** 2 - self.log_std - 0.5 * math.log(2 * math.pi)


# ------------------------------------------------------------------ inner layers
class CPLayer(nn.Module):
    """Hadamard product of two children followed by a sum layer (in log-space)."""

    def __init__(self, num_folds, num_in, num_out):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(num_folds, num_out, num_in) * 0.1)

    def forward(self, left, right):              # (B, F, K) each
        prod = left + right
        w = torch.log_softmax(self.weight, dim=-1)
        return torch.logsumexp(prod.unsqueeze(2) + w.unsqueeze(0), dim=-1)


class TorchCircuit(nn.Module):
    def __init__(self, cfg: CircuitConfig):
        super().__init__()
        c, h, w = cfg.image_shape
        self.num_variables = c * h * w
        if cfg.input_layer == "categorical":
            self.input_layer = CategoricalLayer(self.num_variables, cfg.num_input_units, cfg.num_categories)
        else:
            self.input_layer = GaussianLayer(self.num_variables, cfg.num_input_units)
        layers, folds, k_in = [], self.num_variables, cfg.num_input_units
        while folds > 1:
            folds //= 2
            k_out = 1 if folds == 1 else cfg.num_sum_units
            layers.append(CPLayer(folds, k_in, k_out))
            k_in = k_out
        self.inner = nn.ModuleList(layers)

    def forward(self, x):                        # x: (B, C, H, W)
        h = self.input_layer(x.flatten(1))
        for layer in self.inner:
            h = layer(h[:, 0::2], h[:, 1::2])
        return h.view(-1)                         # log-likelihood per sample


def make_image_data(cfg, n, generator):
    base = torch.linspace(40, 200, cfg.image_shape[1] * cfg.image_shape[2]).view(cfg.image_shape)
    noise = torch.randint(-30, 30, (n, *cfg.image_shape), generator=generator)
    return (base + noise).clamp(0, 255).round()


class CircuitTrainer:
    def __init__(self, cfg: CircuitConfig):
        self.cfg = cfg
        torch.manual_seed(cfg.seed)
        self.circuit = TorchCircuit(cfg)
        self.optimizer = torch.optim.Adam(self.circuit.parameters(), lr=cfg.lr)
        self.history = []

    def fit(self, data):
        for epoch in range(self.cfg.num_epochs):
            for batch in data.split(self.cfg.batch_size):
                log_likelihoods = self.circuit(batch)
                loss = -log_likelihoods.mean()
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
            self.history.append(loss.item())
            print(f"epoch {epoch}: avg NLL per pixel={loss.item() / self.circuit.num_variables:.3f}")

    def input_sensitivity(self, batch):
        batch = batch.clone().requires_grad_(True)
        log_likelihoods = self.circuit(batch)
        mean_log_likelihoods = log_likelihoods.mean()
        dll_dbatch = torch.autograd.grad(mean_log_likelihoods, batch, create_graph=True,  # raises
                                         grad_outputs=torch.ones_like(mean_log_likelihoods))[0]
        return dll_dbatch


def main():
    cfg = CircuitConfig()
    gen = torch.Generator().manual_seed(cfg.seed)
    data = make_image_data(cfg, 64, gen)
    trainer = CircuitTrainer(cfg)
    trainer.fit(data)
    sens = trainer.input_sensitivity(data[:8])
    print("sensitivity map", tuple(sens.shape), float(sens.detach().abs().mean()))


if __name__ == "__main__":
    main()
