# expect: requires_grad_nonleaf
# shape: a two-stage model freezes the backbone's output by setting its flag before the head is trained on it
import torch
import torch.nn as nn
import torch.nn.functional as F


class TwoStage(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(6, 12), nn.Tanh())
        self.head = nn.Linear(12, 2)

    def forward(self, x, train_backbone):
        features = self.backbone(x)
        if not train_backbone:
            features.requires_grad = False  # raises
        return self.head(features)


model = TwoStage()
optimizer = torch.optim.Adam(model.head.parameters(), lr=1e-2)
x, y = torch.randn(8, 6), torch.randint(0, 2, (8,))
for step in range(3):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x, train_backbone=False), y)
    loss.backward()
    optimizer.step()
