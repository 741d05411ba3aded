# expect: clean
# shape: the discriminator step sees the fake detached, so its backward stops at the generator output
import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalConv1d(nn.Conv1d):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.causal_padding = self.dilation[0] * (self.kernel_size[0] - 1)

    def forward(self, x):
        return self._conv_forward(F.pad(x, [self.causal_padding, 0]), self.weight, self.bias)


torch.manual_seed(0)
G = nn.Sequential(CausalConv1d(1, 8, 3), nn.ELU(), CausalConv1d(8, 1, 3))
D = nn.Sequential(nn.Conv1d(1, 8, 3), nn.LeakyReLU(0.2), nn.Conv1d(8, 1, 3))
opt_g = torch.optim.Adam(G.parameters(), lr=1e-3)
opt_d = torch.optim.Adam(D.parameters(), lr=1e-3)
for step in range(2):
    real, z = torch.randn(4, 1, 32), torch.randn(4, 1, 32)
    fake = G(z)
    loss_g = -D(fake).mean()
    opt_g.zero_grad()
    loss_g.backward(retain_graph=True)
    opt_g.step()
    loss_d = F.relu(1 - D(real)).mean() + F.relu(1 + D(fake.detach())).mean()
    opt_d.zero_grad()
    loss_d.backward()
    opt_d.step()
