# expect: freed_graph
# shape: a dataclass config decides whether the recurrent state is detached between steps;
# built with its defaults it is not, so the second backward runs into the freed graph
from dataclasses import dataclass, field

import torch
import torch.nn as nn


@dataclass
class Config:
    widths: list = field(default_factory=lambda: [6, 6])
    detach_state: bool = False
    steps: int = 3


class StackedCells(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cells = nn.ModuleList([nn.GRUCell(w, w) for w in cfg.widths])

    def forward(self, x, states):
        new = []
        for cell, h in zip(self.cells, states):
            x = cell(x, h)
            new.append(x)
        return x, new


cfg = Config()
torch.manual_seed(0)
model = StackedCells(cfg)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
states = [torch.zeros(2, w) for w in cfg.widths]
for step in range(cfg.steps):
    if cfg.detach_state:
        states = [h.detach() for h in states]
    out, states = model(torch.randn(2, cfg.widths[0]), states)
    loss = out.pow(2).mean()
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
