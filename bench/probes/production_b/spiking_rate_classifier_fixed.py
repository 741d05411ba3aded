# expect: clean
# source: https://github.com/jeshraghian/snntorch/issues/250
"""Rate-coded spiking MLP trained with BPTT and a fast-sigmoid surrogate.

Leaky integrate-and-fire neurons keep their membrane potential as module
state (the ``init_hidden`` style), so the network can be driven one time
step at a time from a plain ``nn.Sequential``-like container.
"""
import logging
import math
from dataclasses import dataclass, field
from typing import List, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
log = logging.getLogger("snn")


@dataclass
class SNNConfig:
    in_features: int = 32
    hidden: List[int] = field(default_factory=lambda: [48, 32])
    num_classes: int = 4
    num_steps: int = 12
    beta: float = 0.85
    threshold: float = 1.0
    slope: float = 25.0
    learn_beta: bool = True
    batch_size: int = 16
    num_batches: int = 6
    epochs: int = 2
    lr: float = 2e-3
    weight_decay: float = 1e-5
    log_every: int = 2


class FastSigmoidSpike(torch.autograd.Function):
    """Heaviside forward, fast-sigmoid derivative backward."""

    @staticmethod
    def forward(ctx, centered, slope):
        ctx.save_for_backward(centered)
        ctx.slope = slope
        return (centered > 0).to(centered.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        (centered,) = ctx.saved_tensors
        grad = grad_out / (ctx.slope * centered.abs() + 1.0) ** 2
        return grad, None


class LeakyNeuron(nn.Module):
    """LIF neuron with subtractive reset; membrane kept on the module."""

    def __init__(self, beta: float, threshold: float, slope: float, learn_beta: bool):
        super().__init__()
        beta_t = torch.tensor(float(beta))
        if learn_beta:
            self.beta = nn.Parameter(beta_t)
        else:
            self.register_buffer("beta", beta_t)
        self.threshold = threshold
        self.slope = slope
        self.mem = None

    def reset_state(self):
        self.mem = None

    def forward(self, current: torch.Tensor) -> torch.Tensor:
        if self.mem is None:
            self.mem = torch.zeros_like(current)
        beta = self.beta.clamp(0.0, 1.0)
        prev_spk = FastSigmoidSpike.apply(self.mem - self.threshold, self.slope)
        self.mem = beta * self.mem + current - prev_spk.detach() * self.threshold
        return FastSigmoidSpike.apply(self.mem - self.threshold, self.slope)


class SpikingBlock(nn.Module):
    def __init__(self, n_in: int, n_out: int, cfg: SNNConfig):
        super().__init__()
        self.fc = nn.Linear(n_in, n_out)
        self.lif = LeakyNeuron(cfg.beta, cfg.threshold, cfg.slope, cfg.learn_beta)

    def forward(self, x):
        return self.lif(self.fc(x))


def reset_states(module: nn.Module) -> None:
    for m in module.modules():
        if isinstance(m, LeakyNeuron):
            m.reset_state()


class SpikingMLP(nn.Module):
    def __init__(self, cfg: SNNConfig):
        super().__init__()
        self.cfg = cfg
        dims = [cfg.in_features] + list(cfg.hidden)
        self.blocks = nn.ModuleList(SpikingBlock(a, b, cfg) for a, b in zip(dims[:-1], dims[1:]))
        self.readout = nn.Linear(dims[-1], cfg.num_classes)
        self.out_lif = LeakyNeuron(cfg.beta, cfg.threshold, cfg.slope, cfg.learn_beta)

    def step(self, x_t: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        h = x_t
        for block in self.blocks:
            h = block(h)
        spk = self.out_lif(self.readout(h))
        return spk, self.out_lif.mem

    def forward(self, spikes_in: torch.Tensor):
        reset_states(self)
        spk_rec, mem_rec = [], []
        for t in range(spikes_in.shape[0]):
            spk, mem = self.step(spikes_in[t])
            spk_rec.append(spk)
            mem_rec.append(mem)
        return torch.stack(spk_rec), torch.stack(mem_rec)


def rate_encode(x: torch.Tensor, num_steps: int) -> torch.Tensor:
    probs = torch.sigmoid(x).unsqueeze(0).expand(num_steps, *x.shape)
    return torch.bernoulli(probs)


def membrane_ce_loss(mem_rec: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    steps = mem_rec.shape[0]
    loss = mem_rec.new_zeros(())
    for t in range(steps):
        loss = loss + F.cross_entropy(mem_rec[t], targets)
    return loss / steps


def make_dataset(cfg: SNNConfig):
    g = torch.Generator().manual_seed(1)
    protos = torch.randn(cfg.num_classes, cfg.in_features, generator=g) * 1.5
    batches = []
    for _ in range(cfg.num_batches):
        y = torch.randint(0, cfg.num_classes, (cfg.batch_size,), generator=g)
        x = protos[y] + 0.5 * torch.randn(cfg.batch_size, cfg.in_features, generator=g)
        batches.append((x, y))
    return batches


class Trainer:
    def __init__(self, model: SpikingMLP, cfg: SNNConfig):
        self.model = model
        self.cfg = cfg
        self.optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.history = []

    def train_epoch(self, batches, epoch: int) -> float:
        self.model.train()
        total = 0.0
        for i, (x, y) in enumerate(batches):
            spikes_in = rate_encode(x, self.cfg.num_steps)
            self.optimizer.zero_grad()
            spk_rec, mem_rec = self.model(spikes_in)
            loss = membrane_ce_loss(mem_rec, y)
            loss.backward()
            self.optimizer.step()
            total += loss.item()
            if i % self.cfg.log_every == 0:
                rate = spk_rec.mean().item()
                log.info("epoch %d batch %d loss %.4f firing %.3f", epoch, i, loss.item(), rate)
        return total / max(1, len(batches))

    @torch.no_grad()
    def evaluate(self, batches) -> float:
        self.model.eval()
        correct, seen = 0, 0
        for x, y in batches:
            reset_states(self.model)
            spk_rec, _ = self.model(rate_encode(x, self.cfg.num_steps))
            pred = spk_rec.sum(0).argmax(-1)
            correct += (pred == y).sum().item()
            seen += y.numel()
        reset_states(self.model)
        return correct / max(1, seen)

    def fit(self, train_batches, val_batches):
        for epoch in range(self.cfg.epochs):
            tr = self.train_epoch(train_batches, epoch)
            acc = self.evaluate(val_batches)
            self.history.append((tr, acc))
            log.info("epoch %d train_loss %.4f val_acc %.3f", epoch, tr, acc)
        return self.history


def main():
    torch.manual_seed(0)
    cfg = SNNConfig()
    model = SpikingMLP(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    log.info("spiking mlp with %d parameters, %d steps", n_params, cfg.num_steps)
    data = make_dataset(cfg)
    split = int(math.ceil(0.66 * len(data)))
    history = Trainer(model, cfg).fit(data[:split], data[split:])
    log.info("done: %s", history[-1])


if __name__ == "__main__":
    main()
