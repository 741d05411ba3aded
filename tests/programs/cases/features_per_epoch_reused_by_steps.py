# expect: freed_graph
# shape: features computed once per epoch by a trained backbone, reused by every inner step
import torch
import torch.nn as nn

backbone = nn.Sequential(nn.Linear(8, 16), nn.Tanh())
head = nn.Linear(16, 4)
opt = torch.optim.SGD(list(backbone.parameters()) + list(head.parameters()), lr=0.01)
images, labels = torch.randn(4, 8), torch.randn(4, 4)
for epoch in range(2):
    features = backbone(images)
    for step in range(3):
        loss = nn.functional.mse_loss(head(features), labels)
        opt.zero_grad()
        loss.backward()  # raises
        opt.step()
