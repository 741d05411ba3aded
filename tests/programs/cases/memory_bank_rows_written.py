# expect: freed_graph
# shape: a memory bank buffer whose rows are overwritten with features that carry their graph
import torch
import torch.nn as nn
import torch.nn.functional as F


class Bank(nn.Module):
    def __init__(self, n, dim):
        super().__init__()
        self.register_buffer("memory", torch.randn(n, dim))

    def update(self, feats, idx):
        self.memory[idx] = 0.5 * self.memory[idx] + 0.5 * feats


enc = nn.Linear(5, 3)
bank = Bank(16, 3)
opt = torch.optim.SGD(enc.parameters(), lr=0.1)
for step in range(3):
    idx = torch.arange(4) + 4 * step
    feats = enc(torch.randn(4, 5))
    loss = F.cross_entropy(feats @ bank.memory.t(), idx)
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
    bank.update(feats, idx)
