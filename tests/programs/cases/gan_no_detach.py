# expect: freed_graph
# shape: the same GAN step without the detach: D's backward frees G's graph
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
    loss_d = bce(D(real), torch.ones(5, 1)) + bce(D(fake), torch.zeros(5, 1))
    opt_d.zero_grad()
    loss_d.backward()
    opt_d.step()
    loss_g = bce(D(fake), torch.ones(5, 1))
    opt_g.zero_grad()
    loss_g.backward()  # raises
    opt_g.step()
