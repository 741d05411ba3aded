# expect: requires_grad_nonleaf
# shape: an image converted with torch.from_numpy (a CPU tensor) and moved with `.to(torch.device("cpu"))` (the tensor itself) is given a first explainer, which sets its requires_grad; a second explainer adds noise to it and sets the flag on the sum, a non-leaf that requires grad
import numpy as np
import torch
from torch import nn


class Gradients:
    def __init__(self, model):
        self.model = model

    def explain(self, inp):
        inp.requires_grad = True  # raises
        self.model.zero_grad()
        self.model(inp).sum().backward()
        return inp.grad


class NoisyGradients:
    def __init__(self, model, samples=3):
        self.base = Gradients(model)
        self.samples = samples

    def explain(self, inp):
        total = 0
        for _ in range(self.samples):
            noisy = inp + 0.1 * torch.randn_like(inp)
            total = total + self.base.explain(noisy)
        return total / self.samples


def saliency(model, image, method, device=None):
    device = device or torch.device("cpu")
    image = image.to(device)
    explainer = Gradients(model) if method == "plain" else NoisyGradients(model)
    return explainer.explain(image).abs().sum(dim=1)


if __name__ == "__main__":
    torch.manual_seed(0)
    raw = np.random.RandomState(0).rand(8, 8, 3).astype(np.float32)
    image = torch.from_numpy((raw - 0.5) / 0.25).permute(2, 0, 1).unsqueeze(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 36, 2))
    for method in ("plain", "noisy"):
        print(method, saliency(model, image, method).shape)
