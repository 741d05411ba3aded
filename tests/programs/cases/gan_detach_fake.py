# expect: clean
# shape: GAN step: D sees fake.detach(), G's loss runs a fresh D(fake)
import torch
import torch.nn as nn

G = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 4))
D = nn.Sequential(nn.Linear(4, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1), nn.Sigmoid())
opt_g = torch.optim.Adam(G.parameters())
opt_d = torch.optim.Adam(D.parameters())
bce = nn.BCELoss()
for step in range(3):
    real = torch.randn(5, 4)
    fake = G(torch.randn(5, 2))
    loss_d = bce(D(real), torch.ones(5, 1)) + bce(D(fake.detach()), torch.zeros(5, 1))
    opt_d.zero_grad()
    loss_d.backward()
    opt_d.step()
    loss_g = bce(D(fake), torch.ones(5, 1))
    opt_g.zero_grad()
    loss_g.backward()
    opt_g.step()
