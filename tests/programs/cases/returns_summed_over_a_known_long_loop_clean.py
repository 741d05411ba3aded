# expect: clean
# shape: the twin of returns_summed_over_a_known_long_loop_crash.py that updates the state out of place (`state = state * 0.9 + h`): sixteen steps sum and backpropagate
import torch
import torch.nn as nn


class Cell(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(4, 4)

    def forward(self, x, state):
        h = self.inp(x)
        out = state.pow(2) + h
        state = state * 0.9 + h
        return out, state


cell = Cell()
state = torch.zeros(2, 4)
total = 0.0
for t in range(16):
    out, state = cell(torch.randn(2, 4), state)
    total = total + out.sum()
total.backward()
