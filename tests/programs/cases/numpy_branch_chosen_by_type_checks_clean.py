# expect: clean
# shape: a structure builder keeps its output in the type of its input, chosen by `isinstance(angles, torch.Tensor)` and by `mode == "numpy" and isinstance(coords[0], np.ndarray)`; with numpy angles the coordinates are detached before numpy, and the branch that would stack tensors with numpy never runs
import numpy as np
import torch
from torch import nn


class Builder:
    def __init__(self, angles):
        self.angles = angles
        self.mode = "torch" if isinstance(angles, torch.Tensor) else "numpy"
        self.coords = None

    def build(self, weights):
        self.coords = [torch.cos(weights * k) for k in (1.0, 2.0, 3.0)]
        if self.mode == "numpy" and torch.is_tensor(self.coords[0]):
            self.coords = torch.stack(self.coords).detach().numpy()
        elif self.mode == "numpy" and isinstance(self.coords[0], np.ndarray):
            self.coords = np.stack(self.coords)
        else:
            self.coords = torch.stack(self.coords)
        return self.coords


net = nn.Linear(3, 3)
weights = net(torch.ones(3))
angles = np.linspace(0.0, 1.0, 4)
coords = Builder(angles).build(weights)
print(np.abs(coords).sum())
