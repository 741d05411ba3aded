# expect: inplace_version
# shape: a running total of rewards over a known 16 steps of a state updated in place (`state.mul_(0.9).add_(h)`) after `state.pow(2)` saved it (from the second step on, when it requires grad): the total carries a stale graph from the second step on
import torch
import torch.nn as nn


class Cell(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(4, 4)

    def forward(self, x, state):
        h = self.inp(x)
        out = state.pow(2) + h
        state.mul_(0.9).add_(h)
        return out, state


cell = Cell()
state = torch.zeros(2, 4)
total = 0.0
for t in range(16):
    out, state = cell(torch.randn(2, 4), state)
    total = total + out.sum()
total.backward()  # raises
