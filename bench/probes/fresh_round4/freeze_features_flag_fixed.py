# expect: clean
# source: https://stackoverflow.com/questions/44913720/requires-grad-relation-to-leaf-nodes
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(1)

backbone = nn.Sequential(
    nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
)
with torch.no_grad():
    for p in backbone.parameters():
        p.mul_(0.5)

head = nn.Linear(16, 4)
optimizer = torch.optim.SGD(head.parameters(), lr=0.1, momentum=0.9)

images = torch.randn(64, 3, 16, 16)
labels = torch.randint(0, 4, (64,))


for param in backbone.parameters():
    param.requires_grad = False


def extract(x):
    feats = backbone(x)
    return feats


for epoch in range(3):
    for i in range(0, 64, 16):
        xb, yb = images[i:i + 16], labels[i:i + 16]
        feats = extract(xb)
        loss = F.cross_entropy(head(feats), yb)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.4f}")

print("backbone grads:", [p.grad is None for p in backbone.parameters()])
