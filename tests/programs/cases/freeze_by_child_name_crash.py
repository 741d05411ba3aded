# expect: no_grad_fn
# shape: a pretraining stage freezes children chosen by name from named_children(); the freeze list names the encoder, whose output alone makes the consistency loss, so that loss has no grad_fn
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
freeze(model, ["encoder"])
x = torch.randn(16, 8)
z1, z2 = model.encoder(x), model.encoder(x + 0.01 * torch.randn_like(x))
loss = (z1 - z2).pow(2).mean()
loss.backward()  # raises
