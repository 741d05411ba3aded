# expect: clean
# shape: the @property recomputes the tensor on every access
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    @property
    def emb(self):
        return torch.tanh(self.lin(torch.ones(1, 3)))


m = Model()
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for i in range(3):
    loss = (m.emb * i).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
