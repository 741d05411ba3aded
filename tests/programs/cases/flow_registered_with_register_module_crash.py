# expect: freed_graph
# shape: a flow registers its bijection with `register_module`; latents computed once before the loop are fed to it each step, and each backward goes through the encoder's freed graph
import torch
import torch.nn as nn


class Coupling(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.scale = nn.Linear(dim, dim)

    def forward(self, x):
        s = torch.tanh(self.scale(x))
        return x * torch.exp(s), s.sum(-1)


class Flow(nn.Module):
    def __init__(self, bijection):
        super().__init__()
        self.register_module("bijection", bijection)

    def log_prob(self, x):
        z, log_det = self.bijection(x)
        return -0.5 * (z ** 2).sum(-1) + log_det


torch.manual_seed(0)
encoder = nn.Linear(10, 4)
flow = Flow(Coupling(4))
opt = torch.optim.Adam(flow.parameters(), lr=1e-3)
latent = encoder(torch.randn(32, 10))
for step in range(3):
    opt.zero_grad()
    loss = -flow.log_prob(latent).mean()
    loss.backward()  # raises
    opt.step()
