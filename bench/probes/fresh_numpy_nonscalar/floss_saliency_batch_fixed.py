# expect: clean
# source: https://github.com/zeakey/iccv2019-fmeasure/issues/1
import torch
from torch import nn

torch.manual_seed(7)


class FLoss(nn.Module):
    def __init__(self, beta=0.3, log_like=False):
        super(FLoss, self).__init__()
        self.beta = beta
        self.log_like = log_like

    def forward(self, prediction, target):
        EPS = 1e-10
        N = prediction.size(0)
        TP = (prediction * target).view(N, -1).sum(dim=1)
        H = self.beta * target.view(N, -1).sum(dim=1) + prediction.view(N, -1).sum(dim=1)
        fmeasure = (1 + self.beta) * TP / (H + EPS)
        if self.log_like:
            floss = -torch.log(fmeasure)
        else:
            floss = (1 - fmeasure)
        return floss


class SalNet(nn.Module):
    def __init__(self):
        super(SalNet, self).__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(),
            nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
            nn.Conv2d(16, 1, 1),
        )

    def forward(self, x):
        return torch.sigmoid(self.body(x))


net = SalNet()
fl = FLoss()
optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)

data = torch.rand(4, 3, 64, 64)
target = (torch.rand(4, 1, 64, 64) >= 0.5).float()

for it in range(5):
    output = net(data)
    loss = fl(output, target)
    optimizer.zero_grad()
    loss.mean().backward()
    optimizer.step()
    print("iter %d, FLoss=%.5f" % (it, loss.mean().item()))
