# expect: no_grad_fn
# shape: a linear-probe script swaps the classifier for nn.Identity() (features only) after freezing the backbone: nn.Identity returns its input, so nothing in the loss requires grad
import torch
import torch.nn as nn

backbone = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
for p in backbone.parameters():
    p.requires_grad = False
backbone[2] = nn.Identity()
optimizer = torch.optim.SGD(backbone.parameters(), lr=0.1)
features = backbone(torch.randn(4, 8))
loss = features.pow(2).mean()
loss.backward()  # raises
