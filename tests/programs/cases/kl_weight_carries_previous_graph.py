# expect: freed_graph
# shape: the KL weight updated without the clamp carries the previous step's graph into the next loss
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
    beta = beta + 1e-4 * (kl - 100.0)
    loss = kl + beta * kl
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
