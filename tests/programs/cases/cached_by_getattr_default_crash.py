# expect: freed_graph
# shape: a loss module caches its target embedding under a private attribute read with `getattr(self, "_target", None)`: the first call computes it with a graph, every later call returns it, and the second step's backward runs through the graph the first one freed
import torch
from torch import nn


class EmbeddingMatchLoss(nn.Module):
    def __init__(self, embedder, target):
        super().__init__()
        self.embedder = embedder
        self.target = target

    def target_embedding(self):
        cached = getattr(self, "_target_emb", None)
        if cached is None:
            cached = self._target_emb = self.embedder(self.target)
        return cached

    def forward(self, x):
        return (self.embedder(x) - self.target_embedding()).pow(2).mean()


torch.manual_seed(0)
embedder = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4))
criterion = EmbeddingMatchLoss(embedder, torch.randn(1, 8))
opt = torch.optim.SGD(embedder.parameters(), lr=0.01)
for step in range(3):
    loss = criterion(torch.randn(5, 8))
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
