# expect: inplace_version
# shape: an in-place sigmoid whose result is assigned, on a tensor another layer saved
import torch
import torch.nn as nn


class AE(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(10, 4)
        self.dec = nn.Linear(4, 10)

    def forward(self, x):
        h = self.enc(x)
        recon = self.dec(h)
        code = h.sigmoid_()
        return recon, code


model = AE()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(2):
    x = torch.rand(8, 10)
    recon, code = model(x)
    loss = (recon - x).pow(2).mean() + code.mean()
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
