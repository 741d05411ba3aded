# expect: clean
# shape: the same stage freezes the decoder by name, so the encoder that makes the consistency loss still trains
import torch
import torch.nn as nn


class AutoEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(8, 4), nn.Tanh())
        self.decoder = nn.Linear(4, 8)

    def forward(self, x):
        return self.decoder(self.encoder(x))


def freeze(model, names):
    for name, child in model.named_children():
        if name in names:
            for p in child.parameters():
                p.requires_grad_(False)


model = AutoEncoder()
freeze(model, ["decoder"])
x = torch.randn(16, 8)
z1, z2 = model.encoder(x), model.encoder(x + 0.01 * torch.randn_like(x))
loss = (z1 - z2).pow(2).mean()
loss.backward()
