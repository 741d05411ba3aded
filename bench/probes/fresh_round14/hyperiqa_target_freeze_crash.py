# expect: requires_grad_nonleaf
# source: https://github.com/SSL92/hyperIQA/issues/5
"""HyperIQA-style blind image quality model: a hyper network predicts the
weights of a small target network per image; the target network regresses a
quality score. One training step of the solver on random data."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class HyperNet(nn.Module):
    def __init__(self, feat_dim=32, in_dim=16, hid=8):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, feat_dim, 3, stride=2, padding=1), nn.ReLU(),
                                      nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.in_vec = nn.Linear(feat_dim, in_dim)
        self.fc1w = nn.Linear(feat_dim, in_dim * hid)
        self.fc1b = nn.Linear(feat_dim, hid)
        self.fc2w = nn.Linear(feat_dim, hid)
        self.fc2b = nn.Linear(feat_dim, 1)
        self.in_dim, self.hid = in_dim, hid

    def forward(self, img):
        f = self.backbone(img)
        return {
            "target_in_vec": self.in_vec(f),
            "target_fc1w": self.fc1w(f).view(-1, self.hid, self.in_dim),
            "target_fc1b": self.fc1b(f),
            "target_fc2w": self.fc2w(f).view(-1, 1, self.hid),
            "target_fc2b": self.fc2b(f),
        }


class TargetNet(nn.Module):
    def __init__(self, paras):
        super().__init__()
        self.paras = paras

    def forward(self, x):
        p = self.paras
        h = torch.sigmoid(torch.bmm(p["target_fc1w"], x.unsqueeze(-1)).squeeze(-1) + p["target_fc1b"])
        return (torch.bmm(p["target_fc2w"], h.unsqueeze(-1)).squeeze(-1) + p["target_fc2b"]).squeeze(-1)


model_hyper = HyperNet()
solver = torch.optim.Adam(model_hyper.parameters(), lr=2e-4, weight_decay=5e-4)
img = torch.rand(4, 3, 32, 32)
label = torch.rand(4) * 100

paras = model_hyper(img)
model_target = TargetNet(paras)
# the target network's weights come from the hyper network, do not train them directly
for name, w in paras.items():
    if name != "target_in_vec":
        w.requires_grad = False  # raises

pred = model_target(paras["target_in_vec"])
loss = F.l1_loss(pred, label)
solver.zero_grad()
loss.backward()
solver.step()
print("l1 loss:", loss.item())
