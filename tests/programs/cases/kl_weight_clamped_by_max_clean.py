# expect: clean
# shape: a KL weight annealed with `max(0, beta + step * (kl - target))`: which argument `max` returns depends on the data (here always the number 0), so the weight may carry no graph at all
import torch
import torch.nn as nn

torch.manual_seed(0)


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.mu = nn.Linear(8, 4)
        self.logvar = nn.Linear(8, 4)

    def forward(self, x):
        return self.mu(x), self.logvar(x)


enc = Encoder()
opt = torch.optim.Adam(enc.parameters(), lr=1e-3)
beta = 0.0
for step in range(3):
    mu, logvar = enc(torch.randn(16, 8))
    kl = -0.5 * torch.mean(1 + logvar - mu.pow(2) - logvar.exp())
    beta = max(0, beta + 1e-4 * (kl - 100.0))
    loss = kl + beta * kl
    opt.zero_grad()
    loss.backward()
    opt.step()
