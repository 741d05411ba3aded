# expect: clean
# shape: a property caches a constant table (no parameters involved)
import torch
import torch.nn as nn


class Table(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(6, 6)
        self._table = None

    @property
    def table(self):
        if self._table is None:
            self._table = torch.linspace(0, 1, 6).unsqueeze(0)
        return self._table

    def forward(self, x):
        return self.proj(x + self.table)


m = Table()
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for step in range(3):
    loss = m(torch.randn(2, 6)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
