# expect: grad_unused
# source: https://github.com/hosseinshn/GradNorm/issues/10
import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(0)
np.random.seed(0)


class MTLNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.shared = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU())
        self.head1 = nn.Linear(32, 1)
        self.head2 = nn.Linear(32, 1)

    def forward(self, x):
        h = self.shared(x)
        return self.head1(h), self.head2(h)


net = MTLNet()
Weightloss1 = torch.tensor(1.0, requires_grad=True)
Weightloss2 = torch.tensor(1.0, requires_grad=True)
opt1 = torch.optim.Adam(net.parameters(), lr=1e-3)
opt2 = torch.optim.Adam([Weightloss1, Weightloss2], lr=1e-3)
alpha = 0.16

X = torch.from_numpy(np.random.randn(64, 10).astype(np.float32))
Y1 = torch.from_numpy(np.random.randn(64, 1).astype(np.float32))
Y2 = torch.from_numpy(np.random.randn(64, 1).astype(np.float32))
mse = nn.MSELoss()

for it in range(3):
    out1, out2 = net(X)
    l1 = Weightloss1 * mse(out1, Y1)
    l2 = Weightloss2 * mse(out2, Y2)
    if it == 0:
        l01, l02 = l1.data, l2.data
    opt1.zero_grad()
    (l1 + l2).backward(retain_graph=True)

    param = list(net.shared.parameters())
    G1R = torch.autograd.grad(l1, param[2].clone(), retain_graph=True, create_graph=True)  # raises
    G1 = torch.norm(G1R[0], 2)
    G2R = torch.autograd.grad(l2, param[2].clone(), retain_graph=True, create_graph=True)
    G2 = torch.norm(G2R[0], 2)
    G_avg = (G1 + G2) / 2

    lhat1 = l1.detach() / l01
    lhat2 = l2.detach() / l02
    lhat_avg = (lhat1 + lhat2) / 2
    C1 = (G_avg * (lhat1 / lhat_avg) ** alpha).detach()
    C2 = (G_avg * (lhat2 / lhat_avg) ** alpha).detach()

    opt2.zero_grad()
    Lgrad = torch.abs(G1 - C1) + torch.abs(G2 - C2)
    Lgrad.backward()
    opt1.step()
    opt2.step()

    coef = 2 / (Weightloss1 + Weightloss2)
    with torch.no_grad():
        Weightloss1.mul_(coef)
        Weightloss2.mul_(coef)
    print(it, l1.item(), l2.item(), Lgrad.item())
