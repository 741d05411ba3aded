# expect: inplace_version
# shape: a contrastive head keeps a memory bank as a frozen nn.Parameter and writes the batch's features into it in place before an einsum against it; calling the head twice before one backward (two layers' graphs) overwrites the bank the first einsum saved
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
        return torch.einsum("nc,mc->nm", f, self.Bank).logsumexp(-1).mean()


head = ContrastHead()
optimizer = torch.optim.SGD(head.parameters(), lr=0.1)
layers = [torch.randn(3, 4), torch.randn(3, 4)]
loss = head(layers[0], torch.tensor([0, 1, 2])) + head(layers[1], torch.tensor([3, 4, 5]))
optimizer.zero_grad()
loss.backward()  # raises
optimizer.step()
