# expect: clean
# shape: the same einsum of `queue.keys.clone().detach()`: what it saved is a copy the push does not touch
import torch
import torch.nn as nn
import torch.nn.functional as F


class Queue(nn.Module):
    def __init__(self, dim, size):
        super().__init__()
        self.register_buffer("keys", F.normalize(torch.randn(dim, size), dim=0))
        self.ptr = 0

    @torch.no_grad()
    def push(self, k):
        n = k.shape[0]
        self.keys[:, self.ptr:self.ptr + n] = k.T
        self.ptr = (self.ptr + n) % self.keys.shape[1]


encoder = nn.Linear(8, 16)
queue = Queue(16, 32)
opt = torch.optim.SGD(encoder.parameters(), lr=0.1)
for step in range(2):
    q = F.normalize(encoder(torch.randn(4, 8)), dim=1)
    with torch.no_grad():
        k = F.normalize(encoder(torch.randn(4, 8)), dim=1)
    l_pos = torch.einsum("nc,nc->n", [q, k]).unsqueeze(-1)
    l_neg = torch.einsum("nc,ck->nk", [q, queue.keys.clone().detach()])
    logits = torch.cat([l_pos, l_neg], dim=1) / 0.07
    loss = F.cross_entropy(logits, torch.zeros(4, dtype=torch.long))
    queue.push(k)
    opt.zero_grad()
    loss.backward()
    opt.step()
