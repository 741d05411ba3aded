# expect: nonscalar_backward
# shape: Grad-CAM on a segmentation net: the score of a class is its whole H x W map (the
# convolution, pooling and transposed convolution sizes say so), and backward needs a scalar
import torch
import torch.nn as nn


class TinySegNet(nn.Module):
    def __init__(self, classes=3):
        super().__init__()
        self.enc = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.up = nn.ConvTranspose2d(8, 4, 2, stride=2)
        self.head = nn.Conv2d(4, classes, 1)

    def forward(self, x):
        return self.head(self.up(self.enc(x)))


def class_score(output, category):
    if isinstance(category, int):
        category = [category] * output.size(0)
    score = 0
    for i in range(len(category)):
        score = score + output[i, category[i]]
    return score


torch.manual_seed(0)
model = TinySegNet()
images = torch.rand(2, 3, 16, 16)
score = class_score(model(images), 1)
model.zero_grad()
score.backward()  # raises
print(model.head.weight.grad.norm())
