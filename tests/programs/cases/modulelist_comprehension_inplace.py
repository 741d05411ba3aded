# expect: inplace_version
# shape: coupling blocks in a ModuleList built by a comprehension, each scaling a Tanh output in place
import torch
import torch.nn as nn


class Coupling(nn.Module):
    def __init__(self):
        super().__init__()
        self.s = nn.Sequential(nn.Linear(2, 8), nn.Tanh())
        self.scale = nn.Parameter(torch.ones(8))

    def forward(self, x):
        s = self.s(x)
        s *= self.scale
        return s.sum(1, keepdim=True).expand(-1, 2) + x


flow = nn.ModuleList([Coupling() for _ in range(3)])
opt = torch.optim.Adam(flow.parameters())
for step in range(2):
    z = torch.randn(5, 2)
    for layer in flow:
        z = layer(z)
    loss = z.pow(2).mean()
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
