# expect: grad_unused
# shape: a recipe keeps its layers in an nn.ModuleDict and runs the encoder on detached features (to keep gradients out of feature extraction); an input-saliency pass then asks for the gradient with respect to the waveform, which the loss no longer reaches
import torch
import torch.nn as nn
import torch.nn.functional as F


class Recipe:
    def __init__(self):
        self.filters = torch.randn(16, 8)
        self.modules = nn.ModuleDict({"enc": nn.Linear(8, 8), "head": nn.Linear(8, 3)})

    def forward(self, wavs):
        feats = torch.log((wavs @ self.filters) ** 2 + 1e-6)
        h = torch.tanh(self.modules["enc"](feats.detach()))
        return self.modules.head(h)


recipe = Recipe()
wavs = torch.randn(4, 16, requires_grad=True)
loss = F.cross_entropy(recipe.forward(wavs), torch.tensor([0, 1, 2, 0]))
(saliency,) = torch.autograd.grad(loss, wavs)  # raises
print(saliency.abs().mean(1))
