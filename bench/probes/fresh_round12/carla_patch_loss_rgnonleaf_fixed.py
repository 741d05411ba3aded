# expect: clean
# source: https://github.com/twosixlabs/armory/pull/1999
"""Armory-style CARLA adversarial patch step: the patch is a torch tensor
being optimised, it is composited into the frame, and the detector
estimator's compute_loss() is asked for the attack loss on the patched input."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Detector(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2))
        self.head = nn.Linear(32, 4)

    def forward(self, x, targets):
        boxes = self.head(self.body(x).flatten(1))
        return {"loss_box_reg": F.smooth_l1_loss(boxes, targets)}


class PyTorchObjectDetector:
    def __init__(self, model):
        self._model = model

    def _get_losses(self, x, y):
        self._model.train()
        if x.is_leaf:
            x.requires_grad = True
        else:
            x.retain_grad()
        return self._model(x, y), x

    def compute_loss(self, x, y):
        loss_components, _ = self._get_losses(x=x, y=y)
        return sum(loss_components.values())


torch.manual_seed(0)
estimator = PyTorchObjectDetector(Detector())
image = torch.rand(1, 3, 32, 32)
mask = torch.zeros(1, 1, 32, 32)
mask[..., 4:14, 4:14] = 1.0
patch = torch.rand(1, 3, 32, 32, requires_grad=True)
target = torch.tensor([[0.1, 0.1, 0.4, 0.4]])
optimizer = torch.optim.Adam([patch], lr=0.01)

for step in range(3):
    optimizer.zero_grad()
    patched_input = image * (1 - mask) + patch * mask
    loss = -estimator.compute_loss(x=patched_input, y=target)
    loss.backward()
    optimizer.step()
    with torch.no_grad():
        patch.clamp_(0.0, 1.0)
    print(f"step {step}: loss={loss.item():.4f}")
