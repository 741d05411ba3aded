# expect: freed_graph
# shape: keys cached on self and grown with torch.cat, trained token by token
import torch
import torch.nn as nn
import torch.nn.functional as F


class CachedAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 8)
        self.proj = nn.Linear(8, 16)
        self.out = nn.Linear(8, 20)
        self.k_cache = None

    def step(self, tok):
        q, k = self.proj(self.emb(tok)).chunk(2, dim=-1)
        if self.k_cache is None:
            self.k_cache = k[:, None]
        else:
            self.k_cache = torch.cat([self.k_cache, k[:, None]], dim=1)
        att = (q[:, None] @ self.k_cache.transpose(1, 2)).softmax(-1)
        return self.out((att @ self.k_cache).squeeze(1))


model = CachedAttention()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
seq = torch.randint(0, 20, (2, 5))
for t in range(4):
    loss = F.cross_entropy(model.step(seq[:, t]), seq[:, t + 1])
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
