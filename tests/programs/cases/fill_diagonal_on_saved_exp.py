# expect: inplace_version
# shape: fill_diagonal_ (no out-of-place form) on the output of exp, which exp saved
import torch
import torch.nn as nn
import torch.nn.functional as F

enc = nn.Linear(6, 4)
opt = torch.optim.Adam(enc.parameters())
for step in range(2):
    z = F.normalize(enc(torch.randn(8, 6)), dim=1)
    sim = torch.exp(z @ z.t() / 0.5)
    sim.fill_diagonal_(0)
    loss = -torch.log(sim.sum(1)).mean()
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
