# expect: clean
# shape: the same boundary loss computing the normals from the numpy points themselves: no tensor meets the ndarray
import numpy as np
import torch
import torch.nn as nn


class Disk:
    def __init__(self, center, radius):
        self.center, self.radius = np.array(center), radius

    def boundary_normal(self, x):
        n = x - self.center
        return n / np.linalg.norm(n, axis=-1, keepdims=True)


def sample(rng, n):
    pieces = [rng.uniform(-1, 1, size=(n, 2)) for _ in range(3)]
    return np.vstack(pieces).astype(np.float32)


disk = Disk([0.0, 0.0], 0.5)
net = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 2))
opt = torch.optim.Adam(net.parameters(), lr=1e-3)
points = sample(np.random.default_rng(0), 8)
inputs = torch.as_tensor(points).requires_grad_()
velocity = net(inputs)
normal = disk.boundary_normal(points)
loss = (velocity * torch.as_tensor(normal, dtype=torch.float32)).sum(1).pow(2).mean()
loss.backward()
opt.step()
