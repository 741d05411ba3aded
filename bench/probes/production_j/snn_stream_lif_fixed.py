# expect: clean
# source: https://github.com/norse/norse/issues/130
"""Streaming spiking keyword spotter.

A leaky integrate-and-fire (LIF) network in the style of norse's functional API
(LIFParameters / LIFFeedForwardState / lif_feed_forward_step with a SuperSpike
surrogate gradient).  Long recordings are processed in chunks; the neuron state
is carried from one chunk to the next so that the network can integrate over the
whole utterance (truncated BPTT).
"""
from collections import namedtuple
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

LIFParameters = namedtuple(
    "LIFParameters",
    ["tau_syn_inv", "tau_mem_inv", "v_leak", "v_th", "v_reset", "alpha"],
)
LIFParameters.__new__.__defaults__ = (
    torch.as_tensor(1.0 / 5e-3), torch.as_tensor(1.0 / 1e-2),
    torch.as_tensor(0.0), torch.as_tensor(1.0), torch.as_tensor(0.0),
    torch.as_tensor(100.0),
)
LIFFeedForwardState = namedtuple("LIFFeedForwardState", ["v", "i"])
LIState = namedtuple("LIState", ["v", "i"])


class SuperSpike(torch.autograd.Function):
    """Heaviside forward, fast-sigmoid surrogate backward (Zenke & Ganguli)."""

    @staticmethod
    def forward(ctx, input_tensor, alpha):
        ctx.save_for_backward(input_tensor)
        ctx.alpha = alpha
        return torch.gt(input_tensor, torch.as_tensor(0.0)).to(input_tensor.dtype)

    @staticmethod
    def backward(ctx, grad_output):
        (inp,) = ctx.saved_tensors
        alpha = ctx.alpha
        grad = grad_output / (alpha * torch.abs(inp) + 1.0).pow(2)
        return grad, None


def threshold(x, alpha):
    return SuperSpike.apply(x, alpha)


def lif_feed_forward_step(input_tensor, state, p, dt=1e-3):
    dv = dt * p.tau_mem_inv * ((p.v_leak - state.v) + state.i)
    v_decayed = state.v + dv
    di = -dt * p.tau_syn_inv * state.i
    i_decayed = state.i + di
    z_new = threshold(v_decayed - p.v_th, p.alpha)
    v_new = (1 - z_new) * v_decayed + z_new * p.v_reset
    i_new = i_decayed + input_tensor
    return z_new, LIFFeedForwardState(v=v_new, i=i_new)


def li_step(input_tensor, state, p, dt=1e-3):
    dv = dt * p.tau_mem_inv * ((p.v_leak - state.v) + state.i)
    v_new = state.v + dv
    di = -dt * p.tau_syn_inv * state.i
    i_new = state.i + di + input_tensor
    return v_new, LIState(v=v_new, i=i_new)


class LIFCell(nn.Module):
    def __init__(self, p=LIFParameters(), dt=1e-3):
        super().__init__()
        self.p, self.dt = p, dt

    def initial_state(self, x):
        z = torch.zeros_like(x)
        return LIFFeedForwardState(v=self.p.v_leak.expand_as(x).clone(), i=z)

    def forward(self, x, state=None):
        if state is None:
            state = self.initial_state(x)
        return lif_feed_forward_step(x, state, self.p, self.dt)


@dataclass
class SNNConfig:
    n_mels: int = 20
    hidden: int = 48
    n_classes: int = 4
    seq_len: int = 48
    chunk: int = 12
    batch: int = 8
    epochs: int = 2
    lr: float = 2e-3
    stateful: bool = True
    seed: int = 0


class StreamingSNN(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.encoder = nn.Linear(cfg.n_mels, cfg.hidden)
        self.lif = LIFCell(LIFParameters(alpha=torch.as_tensor(50.0)))
        self.readout = nn.Linear(cfg.hidden, cfg.n_classes)
        self.li_p = LIFParameters()
        self.state = None

    def reset(self):
        self.state = None

    def _carry_state(self, lif_state, li_state):
        # keep the membrane/synaptic state for the next chunk of the stream,
        # cut from the graph of the chunk that was just back-propagated
        self.state = (
            LIFFeedForwardState(v=lif_state.v.detach(), i=lif_state.i.detach()),
            LIState(v=li_state.v.detach(), i=li_state.i.detach()),
        )

    def forward(self, chunk):
        # chunk: [T, B, n_mels]
        lif_state, li_state = self.state if self.state is not None else (None, None)
        voltages = []
        for t in range(chunk.shape[0]):
            z, lif_state = self.lif(12.0 * self.encoder(chunk[t]), lif_state)
            y = self.readout(z)
            if li_state is None:
                li_state = LIState(v=torch.zeros_like(y), i=torch.zeros_like(y))
            v, li_state = li_step(y, li_state, self.li_p)
            voltages.append(v)
        if self.cfg.stateful:
            self._carry_state(lif_state, li_state)
        return torch.stack(voltages)


def decode(voltages):
    m, _ = torch.max(voltages, 0)
    return F.log_softmax(m, dim=1)


def make_recordings(cfg, n, rng):
    """Synthetic mel-like streams: each class has its own formant band."""
    labels = rng.randint(0, cfg.n_classes, size=n)
    t = np.arange(cfg.seq_len)[:, None]
    data = np.zeros((cfg.seq_len, n, cfg.n_mels), dtype=np.float32)
    for k, c in enumerate(labels):
        band = 3 + 4 * c
        env = np.exp(-((np.arange(cfg.n_mels) - band) ** 2) / 4.0)
        data[:, k, :] = (0.5 + 0.5 * np.sin(0.3 * t + c)) * env + 0.1 * rng.rand(cfg.seq_len, cfg.n_mels)
    return torch.from_numpy(data), torch.from_numpy(labels).long()


class StreamTrainer:
    def __init__(self, cfg):
        self.cfg = cfg
        self.model = StreamingSNN(cfg)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.lr)
        self.log = []

    def train_epoch(self, x, y):
        self.model.train()
        for b in range(0, x.shape[1], self.cfg.batch):
            xb, yb = x[:, b:b + self.cfg.batch], y[b:b + self.cfg.batch]
            self.model.reset()
            for s in range(0, self.cfg.seq_len, self.cfg.chunk):
                voltages = self.model(xb[s:s + self.cfg.chunk])
                loss = F.nll_loss(decode(voltages), yb)
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
                self.log.append(loss.item())

    @torch.no_grad()
    def evaluate(self, x, y):
        self.model.eval()
        self.model.reset()
        outs = [self.model(x[s:s + self.cfg.chunk]) for s in range(0, self.cfg.seq_len, self.cfg.chunk)]
        pred = decode(torch.cat(outs)).argmax(1)
        self.model.reset()
        return (pred == y).float().mean().item()


def main():
    cfg = SNNConfig()
    torch.manual_seed(cfg.seed)
    rng = np.random.RandomState(cfg.seed)
    x_tr, y_tr = make_recordings(cfg, 32, rng)
    x_va, y_va = make_recordings(cfg, 16, rng)
    trainer = StreamTrainer(cfg)
    for epoch in range(cfg.epochs):
        trainer.train_epoch(x_tr, y_tr)
        acc = trainer.evaluate(x_va, y_va)
        print(f"epoch {epoch} loss {np.mean(trainer.log[-8:]):.4f} val acc {acc:.3f}")


main()
