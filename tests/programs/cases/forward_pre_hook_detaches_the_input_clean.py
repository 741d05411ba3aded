# expect: clean
# shape: the same pre-hook keeping the graph: the loss reaches the image
import torch
import torch.nn as nn


class Normalize:
    def __init__(self, mean, std, keep_graph):
        self.mean, self.std, self.keep_graph = mean, std, keep_graph

    def __call__(self, module, args):
        (x,) = args
        if not self.keep_graph:
            x = x.detach()
        return ((x - self.mean) / self.std,)


model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
model.requires_grad_(False)
model.register_forward_pre_hook(Normalize(0.5, 2.0, keep_graph=True))
x = torch.rand(2, 4, requires_grad=True)
loss = nn.functional.cross_entropy(model(x), torch.tensor([0, 2]))
loss.backward()
print(x.grad.abs().sum())
