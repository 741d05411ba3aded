# expect: freed_graph
# shape: a @property computes a tensor once and caches it on self; later backward calls reuse it
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self._emb = None

    @property
    def emb(self):
        if self._emb is None:
            self._emb = torch.tanh(self.lin(torch.ones(1, 3)))
        return self._emb


m = Model()
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for i in range(3):
    loss = (m.emb * i).sum()
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
