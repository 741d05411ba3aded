# expect: clean
# shape: the memory bank's rows are overwritten with detached features
import torch
import torch.nn as nn
import torch.nn.functional as F


class Bank(nn.Module):
    def __init__(self, n, dim):
        super().__init__()
        self.register_buffer("memory", torch.randn(n, dim))

    def update(self, feats, idx):
        self.memory[idx] = 0.5 * self.memory[idx] + 0.5 * feats.detach()


enc = nn.Linear(5, 3)
bank = Bank(16, 3)
opt = torch.optim.SGD(enc.parameters(), lr=0.1)
for step in range(3):
    idx = torch.arange(4) + 4 * step
    feats = enc(torch.randn(4, 5))
    loss = F.cross_entropy(feats @ bank.memory.t(), idx)
    opt.zero_grad()
    loss.backward()
    opt.step()
    bank.update(feats, idx)
