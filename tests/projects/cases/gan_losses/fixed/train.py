# expect: clean
# shape: GAN losses defined in another module share the generator's output
import torch
import torch.nn as nn

from losses import discriminator_loss, generator_loss

G = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 2))
D = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 1))
opt_g = torch.optim.Adam(G.parameters(), lr=1e-3)
opt_d = torch.optim.Adam(D.parameters(), lr=1e-3)
for step in range(2):
    real = torch.randn(16, 2)
    fake = G(torch.randn(16, 2))
    opt_d.zero_grad()
    discriminator_loss(D, real, fake).backward()
    opt_d.step()
    opt_g.zero_grad()
    generator_loss(D, fake).backward()
    opt_g.step()
