# expect: inference_tensor
# shape: a trainer runs validation inside `torch.inference_mode()`, so the DataLoader's batches are inference tensors; the validation step turns gradients back on (`inference_mode(False)`, `enable_grad()`) for a gradient-based metric, and the first layer saves the batch for backward
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))

    def saliency(self, x):
        x = x.clone().requires_grad_(True)
        score = self.net(x).logsumexp(-1).sum()
        (g,) = torch.autograd.grad(score, x)
        return g.abs().mean()

    def validation_step(self, batch):
        x, y = batch
        with torch.inference_mode(False), torch.enable_grad():
            emissions = self.net(x)  # raises
            return (emissions.argmax(-1) == y).float().mean()


def validate(model, loader):
    model.eval()
    with torch.inference_mode():
        return [model.validation_step(batch) for batch in loader]


torch.manual_seed(0)
loader = DataLoader(TensorDataset(torch.randn(16, 8), torch.randint(0, 4, (16,))), batch_size=8)
print(validate(Tagger(), loader))
