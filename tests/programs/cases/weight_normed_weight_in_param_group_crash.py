# expect: nonleaf_optimizer
# shape: projected-optimizer param groups collect `module.weight` of every nn.Linear; one Linear is weight-normed, so its `weight` is computed from the parametrization on each read, not a leaf
import torch
import torch.nn as nn
from torch.nn.utils.parametrizations import weight_norm


class Encoder(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.inp = nn.Linear(d, d)
        self.proj = weight_norm(nn.Linear(d, d))

    def forward(self, x):
        return self.proj(torch.relu(self.inp(x)))


torch.manual_seed(0)
model = Encoder()
projected = []
for name, module in model.named_modules():
    if isinstance(module, nn.Linear):
        projected.append(module.weight)
ids = [id(p) for p in projected]
rest = [p for p in model.parameters() if id(p) not in ids]
optimizer = torch.optim.AdamW([{"params": rest}, {"params": projected, "weight_decay": 0.0}], lr=1e-3)  # raises
loss = model(torch.randn(4, 16)).pow(2).mean()
loss.backward()
optimizer.step()
