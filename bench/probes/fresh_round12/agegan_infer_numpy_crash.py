# expect: numpy_requires_grad
# source: https://github.com/HasnainRaz/Fast-AgingGAN/issues/8
"""Notebook port of Fast-AgingGAN's infer.py: load the face-aging generator,
run it over a few face crops and lay the input/aged pairs out on a 2 x N
canvas (numpy stand-in for the matplotlib subplot grid)."""
import random

import numpy as np
import torch
import torch.nn as nn


class ResidualBlock(nn.Module):
    def __init__(self, in_features):
        super().__init__()
        self.block = nn.Sequential(
            nn.ReflectionPad2d(1), nn.Conv2d(in_features, in_features, 3),
            nn.InstanceNorm2d(in_features), nn.ReLU(inplace=True),
            nn.ReflectionPad2d(1), nn.Conv2d(in_features, in_features, 3),
            nn.InstanceNorm2d(in_features))

    def forward(self, x):
        return x + self.block(x)


class Generator(nn.Module):
    def __init__(self, ngf=32, n_residual_blocks=9):
        super().__init__()
        layers = [nn.ReflectionPad2d(3), nn.Conv2d(3, ngf, 7), nn.InstanceNorm2d(ngf), nn.ReLU(inplace=True),
                  nn.Conv2d(ngf, ngf * 2, 3, stride=2, padding=1), nn.InstanceNorm2d(ngf * 2), nn.ReLU(inplace=True)]
        layers += [ResidualBlock(ngf * 2) for _ in range(n_residual_blocks)]
        layers += [nn.ConvTranspose2d(ngf * 2, ngf, 3, stride=2, padding=1, output_padding=1),
                   nn.InstanceNorm2d(ngf), nn.ReLU(inplace=True),
                   nn.ReflectionPad2d(3), nn.Conv2d(ngf, 3, 7), nn.Tanh()]
        self.model = nn.Sequential(*layers)

    def forward(self, x):
        return self.model(x)


torch.manual_seed(0)
random.seed(0)
image_paths = [f"face_{i}.png" for i in range(4)]
images = {p: torch.rand(3, 64, 64) for p in image_paths}   # stand-in for Image.open + ToTensor

model = Generator(ngf=8, n_residual_blocks=3)
model.eval()
normalize = lambda t: (t - 0.5) / 0.5

nr_images = len(image_paths)
canvas = np.zeros((2, nr_images, 64, 64, 3), dtype=np.float32)
random.shuffle(image_paths)
for i in range(nr_images):
    img = normalize(images[image_paths[i]]).unsqueeze(0)
    aged_face = model(img)
    aged_face = (aged_face.squeeze().permute(1, 2, 0).numpy() + 1.0) / 2.0  # raises
    canvas[0, i] = (img.squeeze().permute(1, 2, 0).numpy() + 1.0) / 2.0
    canvas[1, i] = aged_face

print("canvas", canvas.shape, float(canvas.mean()))
