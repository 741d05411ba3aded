# expect: clean
# shape: the twin of cached_by_getattr_default_crash.py that computes the cached target embedding under no_grad: it carries no graph, and each step backpropagates only its own
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
            with torch.no_grad():
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
    loss.backward()
    opt.step()
