# expect: clean
# shape: the twin of tbptt_every_k_steps_without_detach_crash.py that detaches the hidden state after each truncation: every backward stays within its own k steps
import torch
from torch import nn


class Config:
    seq_len = 24
    bptt = 4
    hidden = 16


class Tracker(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cell = nn.GRUCell(3, cfg.hidden)
        self.head = nn.Linear(cfg.hidden, 3)

    def step(self, x, h):
        h = self.cell(x, h)
        return self.head(h), h


def train(cfg):
    torch.manual_seed(0)
    model = Tracker(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    xs = torch.randn(cfg.seq_len, 8, 3)
    h = torch.zeros(8, cfg.hidden)
    loss = 0.0
    for t in range(cfg.seq_len - 1):
        pred, h = model.step(xs[t], h)
        loss = loss + (pred - xs[t + 1]).pow(2).mean()
        if (t + 1) % cfg.bptt == 0:
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss = 0.0
            h = h.detach()
    return model


if __name__ == "__main__":
    train(Config())
