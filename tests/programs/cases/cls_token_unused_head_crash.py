# expect: grad_unused
# shape: a hybrid ViT prepends a class token with torch.cat and embeds patches with a CNN backbone's forward_features, so the backbone's classifier head is never used; per-environment gradients over all of model.parameters() then fail
import torch
import torch.nn as nn
import torch.nn.functional as F


class Backbone(nn.Module):
    def __init__(self, width=8, classes=10):
        super().__init__()
        self.conv = nn.Conv2d(3, width, 3, padding=1)
        self.fc = nn.Linear(width, classes)

    def forward_features(self, x):
        return F.relu(self.conv(x))

    def forward(self, x):
        return self.fc(self.forward_features(x).mean((2, 3)))


class HybridViT(nn.Module):
    def __init__(self, backbone, dim=8, classes=2):
        super().__init__()
        self.backbone = backbone
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.backbone.forward_features(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.size(0), -1, -1), x], 1)
        return self.head(x[:, 0])


model = HybridViT(Backbone())
params = list(model.parameters())
x, y = torch.randn(4, 3, 6, 6), torch.randint(0, 2, (4,))
out = model(x)
for env_out, env_y in zip(out.view(2, 2, -1), y.view(2, 2)):
    loss = F.cross_entropy(env_out, env_y)
    grads = torch.autograd.grad(loss, params, retain_graph=True)  # raises
