# expect: freed_graph
# shape: a MoCo-style queue of keys kept on self, enqueued with their graph; the next step's contrastive loss uses it
import torch
import torch.nn as nn
import torch.nn.functional as F


class Contrast(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(6, 4)
        self.queue = torch.randn(8, 4)

    def forward(self, q_in, k_in):
        q = F.normalize(self.encoder(q_in), dim=1)
        k = F.normalize(self.encoder(k_in), dim=1)
        logits = q @ self.queue.t()
        self.queue = torch.cat([k, self.queue[: -k.shape[0]]])
        return logits


model = Contrast()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    logits = model(torch.randn(2, 6), torch.randn(2, 6))
    loss = F.cross_entropy(logits, torch.zeros(2, dtype=torch.long))
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
