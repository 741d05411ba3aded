# expect: clean
# shape: the same contrastive head comparing against a copy of the bank (self.Bank.clone()): the later write leaves what the einsum saved alone
import torch
import torch.nn as nn


class ContrastHead(nn.Module):
    def __init__(self, dim=4, mem_size=10):
        super().__init__()
        self.trans = nn.Linear(dim, dim)
        self.Bank = nn.Parameter(torch.zeros(mem_size, dim), requires_grad=False)

    def forward(self, f, index):
        f = self.trans(f)
        f = f / f.norm(dim=-1, keepdim=True)
        self.Bank[index] = f.detach()
        return torch.einsum("nc,mc->nm", f, self.Bank.clone()).logsumexp(-1).mean()


head = ContrastHead()
optimizer = torch.optim.SGD(head.parameters(), lr=0.1)
layers = [torch.randn(3, 4), torch.randn(3, 4)]
loss = head(layers[0], torch.tensor([0, 1, 2])) + head(layers[1], torch.tensor([3, 4, 5]))
optimizer.zero_grad()
loss.backward()
optimizer.step()
