# expect: clean
# shape: the same recipe keeps its layers in an nn.ModuleDict and runs the encoder on the features themselves, so the input-saliency gradient reaches the waveform
import torch
import torch.nn as nn
import torch.nn.functional as F


class Recipe:
    def __init__(self):
        self.filters = torch.randn(16, 8)
        self.modules = nn.ModuleDict({"enc": nn.Linear(8, 8), "head": nn.Linear(8, 3)})

    def forward(self, wavs):
        feats = torch.log((wavs @ self.filters) ** 2 + 1e-6)
        h = torch.tanh(self.modules["enc"](feats))
        return self.modules.head(h)


recipe = Recipe()
wavs = torch.randn(4, 16, requires_grad=True)
loss = F.cross_entropy(recipe.forward(wavs), torch.tensor([0, 1, 2, 0]))
(saliency,) = torch.autograd.grad(loss, wavs)
print(saliency.abs().mean(1))
