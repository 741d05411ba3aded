# expect: numpy_requires_grad
# shape: a multi-stage restoration model's stage losses are summed with np.sum inside a compute_loss helper whose result is backpropagated
import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(0)


class Stages(nn.Module):
    def __init__(self):
        super().__init__()
        self.stages = nn.ModuleList([nn.Conv2d(3, 3, 3, padding=1) for _ in range(3)])

    def forward(self, x):
        outs = []
        for stage in self.stages:
            x = stage(x)
            outs.append(x)
        return outs


class Trainer:
    def __init__(self):
        self.model = Stages()
        self.criterion = nn.L1Loss()
        self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-3)

    def compute_loss(self, restored, target):
        return np.sum([self.criterion(restored[j], target) for j in range(len(restored))])  # raises

    def step(self, blurred, sharp):
        self.opt.zero_grad()
        loss = self.compute_loss(self.model(blurred), sharp)
        loss.backward()
        self.opt.step()
        return loss.item()


trainer = Trainer()
print(trainer.step(torch.randn(2, 3, 8, 8), torch.randn(2, 3, 8, 8)))
