# expect: freed_graph
# shape: a property computes a learned table once and caches it on the module
import torch
import torch.nn as nn


class Table(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(1, 6)
        self._table = None

    @property
    def table(self):
        if self._table is None:
            self._table = self.proj(torch.linspace(0, 1, 5).unsqueeze(1))
        return self._table

    def forward(self, x):
        return x + self.table.sum(0)


m = Table()
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for step in range(3):
    loss = m(torch.randn(2, 6)).pow(2).mean()
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
