# expect: clean
# shape: an encoder caches its representations until the next parameter update; it overrides `train(mode)` to drop a cache filled in eval mode, which `model.train()` calls on each child
import torch
import torch.nn as nn


class CachedEncoder(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)
        self.enriched = None

    def forward(self, x):
        if self.enriched is None:
            self.enriched = torch.tanh(self.lin(x))
        return self.enriched

    def post_parameter_update(self):
        self.enriched = None

    def train(self, mode=True):
        # computed without gradient tracking in eval mode: invalidate it
        if mode and not self.training:
            self.enriched = None
        return super().train(mode=mode)


class Scorer(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.encoder = CachedEncoder(dim)

    def forward(self, x):
        return self.encoder(x).sum(-1)


torch.manual_seed(0)
model = Scorer(4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(8, 4), torch.randn(8)
for epoch in range(2):
    model.train()
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
    model.encoder.post_parameter_update()
    model.eval()
    with torch.no_grad():
        print(epoch, ((model(x) - y) ** 2).mean().item())
