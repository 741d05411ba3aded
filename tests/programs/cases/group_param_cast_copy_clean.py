# expect: clean
# shape: the same loss module makes its Parameters float64 from the start, so each param group names a leaf
import torch
import torch.nn as nn
import torch.nn.functional as F


class OverparamLoss(nn.Module):
    def __init__(self, n, c):
        super().__init__()
        self.u = nn.Parameter(torch.empty(n, 1, dtype=torch.float64).normal_(0, 1e-8))
        self.v = nn.Parameter(torch.empty(n, c, dtype=torch.float64).normal_(0, 1e-8))

    def forward(self, idx, logits, target):
        noise = (self.u[idx] ** 2) * target - (self.v[idx] ** 2) * (1 - target)
        return F.mse_loss(logits.double().softmax(1) + noise, target)


net = nn.Linear(5, 3)
crit = OverparamLoss(10, 3)
opt = torch.optim.SGD([{"params": net.parameters()}], lr=0.1)
opt_loss = torch.optim.SGD([{"params": crit.u, "lr": 1.0}, {"params": crit.v, "lr": 10.0}])
idx = torch.arange(4)
target = F.one_hot(torch.randint(0, 3, (4,)), 3).double()
loss = crit(idx, net(torch.randn(4, 5)), target)
opt.zero_grad()
opt_loss.zero_grad()
loss.backward()
opt.step()
opt_loss.step()
