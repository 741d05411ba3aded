# expect: clean
# source: https://github.com/dillondavis/RecurrentAttentionConvolutionalNeuralNetwork/issues/4
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class RankLoss(nn.Module):
    def __init__(self, margin):
        super(RankLoss, self).__init__()
        self.margin = margin

    def forward(self, scores1, scores2, target):
        ps1 = F.softmax(scores1, dim=1).gather(1, target.long().view(-1, 1))
        ps2 = F.softmax(scores2, dim=1).gather(1, target.long().view(-1, 1))
        return torch.clamp(ps1 - ps2 + self.margin, min=0).mean()


class TwoScaleRACNN(nn.Module):
    def __init__(self, num_classes=5):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4))
        self.cls1 = nn.Linear(8 * 16, num_classes)
        self.cls2 = nn.Linear(8 * 16, num_classes)
        self.apn = nn.Sequential(nn.Flatten(), nn.Linear(8 * 16, 3), nn.Sigmoid())

    def attend(self, x, box):
        tx, ty, tl = box[:, 0] - 0.5, box[:, 1] - 0.5, 0.3 + 0.5 * box[:, 2]
        zeros = torch.zeros_like(tl)
        theta = torch.stack([torch.stack([tl, zeros, tx], 1), torch.stack([zeros, tl, ty], 1)], 1)
        grid = F.affine_grid(theta, list(x.shape), align_corners=False)
        return F.grid_sample(x, grid, align_corners=False)

    def forward(self, x):
        f1 = self.features(x)
        s1 = self.cls1(f1.flatten(1))
        x2 = self.attend(x, self.apn(f1))
        s2 = self.cls2(self.features(x2).flatten(1))
        return [s1, s2]


model = TwoScaleRACNN()
criterion_rank = RankLoss(0.05)
apn_optimizer = torch.optim.SGD(model.apn.parameters(), lr=1e-3)

batch = torch.randn(32, 3, 24, 24)
label = torch.randint(0, 5, (32,))

model.zero_grad()
scores = model(batch)
for i in range(len(scores) - 1, 0, -1):
    retain_graph = (i - 1) > 0
    criterion_rank(scores[i - 1], scores[i], label).backward(retain_graph=retain_graph)
apn_optimizer.step()
print("rank step done")
