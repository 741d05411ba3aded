# expect: clean
# shape: the first explainer sets requires_grad on the caller's image itself; the smoothing
# explainer (its base explainer made by `base or VanillaGrad(model)`) detaches each noisy
# copy of it, a leaf whose flag can be set
import torch
import torch.nn as nn


class VanillaGrad:
    def __init__(self, model):
        self.model = model

    def explain(self, inp):
        inp.requires_grad = True
        score = self.model(inp).max(1)[0].sum()
        score.backward()
        return inp.grad


class SmoothGrad:
    def __init__(self, model, base=None, samples=3, sigma=0.1):
        self.base = base or VanillaGrad(model)
        self.samples = samples
        self.sigma = sigma

    def explain(self, inp):
        total = 0
        for _ in range(self.samples):
            noisy = (inp + self.sigma * torch.randn_like(inp)).detach()
            total = total + self.base.explain(noisy) ** 2
        return total / self.samples


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
image = torch.rand(1, 8)
plain = VanillaGrad(model).explain(image)
smooth = SmoothGrad(model).explain(image)
print(plain.abs().sum().item(), smooth.sum().item())
