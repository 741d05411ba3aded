# expect: nonscalar_backward
# shape: a data-parallel stand-in gathers each replica's outputs with a recursive gather; the per-replica scalar losses are stacked into a vector that reaches backward
import torch
import torch.nn as nn
import torch.nn.functional as F


class Replicated(nn.Module):
    """Splits the batch over `n` replicas of one module and gathers what they return."""

    def __init__(self, module, n=2):
        super().__init__()
        self.module, self.n = module, n

    def forward(self, x, y):
        outputs = [self.module(xs, ys) for xs, ys in zip(x.chunk(self.n), y.chunk(self.n))]
        return self.gather(outputs)

    def gather(self, outputs):
        first = outputs[0]
        if isinstance(first, dict):
            return {k: self.gather([o[k] for o in outputs]) for k in first}
        if first.dim() == 0:
            return torch.stack(outputs)
        return torch.cat(outputs, 0)


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(5, 1)

    def forward(self, x, y):
        pred = self.net(x)
        return {"loss": F.mse_loss(pred, y), "pred": pred}


torch.manual_seed(0)
model = Replicated(Regressor())
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(8, 5), torch.randn(8, 1)
out = model(x, y)
optimizer.zero_grad()
out["loss"].backward()  # raises
optimizer.step()
