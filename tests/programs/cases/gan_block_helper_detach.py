# expect: clean
# shape: GAN whose layer lists come from a block() helper (append, *-unpacking); D trains on fake.detach()
import torch
import torch.nn as nn


def block(i, o, normalize=True):
    layers = [nn.Linear(i, o)]
    if normalize:
        layers.append(nn.BatchNorm1d(o, 0.8))
    layers.append(nn.LeakyReLU(0.2, inplace=True))
    return layers


torch.manual_seed(0)
generator = nn.Sequential(*block(4, 8, normalize=False), *block(8, 8), nn.Linear(8, 4), nn.Tanh())
discriminator = nn.Sequential(*block(4, 8, normalize=False), *block(8, 8), nn.Linear(8, 1), nn.Sigmoid())
opt_G = torch.optim.Adam(generator.parameters(), lr=2e-4)
opt_D = torch.optim.Adam(discriminator.parameters(), lr=2e-4)
bce = nn.BCELoss()
valid, fake_label = torch.ones(8, 1), torch.zeros(8, 1)
for step in range(3):
    real = torch.rand(8, 4) * 2 - 1
    fake = generator(torch.randn(8, 4))
    g_loss = bce(discriminator(fake), valid)
    opt_G.zero_grad()
    g_loss.backward()
    opt_G.step()
    d_loss = (bce(discriminator(real), valid) + bce(discriminator(fake.detach()), fake_label)) / 2
    opt_D.zero_grad()
    d_loss.backward()
    opt_D.step()
