# expect: freed_graph
# shape: the generator steps first; the discriminator step then feeds it the same fake, not detached
import torch
import torch.nn as nn

G = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 6))
D = nn.Sequential(nn.Linear(6, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1))
opt_G = torch.optim.Adam(G.parameters(), lr=1e-3)
opt_D = torch.optim.Adam(D.parameters(), lr=1e-3)
bce = nn.BCEWithLogitsLoss()
for step in range(2):
    real = torch.randn(4, 6)
    fake = G(torch.randn(4, 4))
    opt_G.zero_grad()
    loss_G = bce(D(fake), torch.ones(4, 1))
    loss_G.backward()
    opt_G.step()
    opt_D.zero_grad()
    loss_D = bce(D(real), torch.ones(4, 1)) + bce(D(fake), torch.zeros(4, 1))
    loss_D.backward()  # raises
    opt_D.step()
