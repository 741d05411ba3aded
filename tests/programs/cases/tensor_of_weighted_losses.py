# expect: no_grad_fn
# shape: weighted task losses put into torch.tensor([...]), which copies their values without a graph
import torch
import torch.nn as nn
import torch.nn.functional as F

trunk = nn.Linear(8, 8)
heads = nn.ModuleDict({"a": nn.Linear(8, 1), "b": nn.Linear(8, 1)})
opt = torch.optim.Adam(list(trunk.parameters()) + list(heads.parameters()))
weights = {"a": 1.0, "b": 0.5}
for step in range(2):
    h = trunk(torch.randn(4, 8))
    losses = {k: F.mse_loss(head(h), torch.zeros(4, 1)) for k, head in heads.items()}
    total = torch.tensor([weights[k] * v for k, v in losses.items()]).sum()
    opt.zero_grad()
    total.backward()  # raises
    opt.step()
