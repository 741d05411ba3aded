# expect: nonscalar_backward
# shape: a class-score map pooled with F.max_pool2d keeps its spatial sizes (the pooling formula), and backward is called on the map
import torch
import torch.nn as nn
import torch.nn.functional as F


class TinyUNetHead(nn.Module):
    def __init__(self, n_classes=3):
        super().__init__()
        self.enc = nn.Conv2d(3, 8, 3, padding=1)
        self.cls = nn.Conv2d(8, n_classes, 1)

    def forward(self, x):
        return self.cls(F.relu(self.enc(x)))


torch.manual_seed(0)
model = TinyUNetHead()
image = torch.rand(1, 3, 32, 32)
logits = model(image)
pooled = F.max_pool2d(logits, kernel_size=2, stride=2)
score = pooled[:, 1]
model.zero_grad()
score.backward()  # raises
