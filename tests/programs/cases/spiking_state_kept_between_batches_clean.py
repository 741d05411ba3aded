# expect: clean
# shape: the twin of spiking_state_kept_between_batches_crash.py that resets the membrane before each batch: each batch builds its own graph
import torch
import torch.nn as nn


class Spike(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return (x > 0).float()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad / (10 * x.abs() + 1.0) ** 2


class LIF(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.fc = nn.Linear(n_in, n_out)
        self.mem = None

    def reset(self):
        self.mem = None

    def forward(self, x):
        if self.mem is None:
            self.mem = torch.zeros(x.shape[0], self.fc.out_features)
        self.mem = 0.9 * self.mem + self.fc(x)
        return Spike.apply(self.mem - 1.0)


def run(layer, spikes):
    out = []
    for t in range(spikes.shape[0]):
        out.append(layer(spikes[t]))
    return torch.stack(out)


layer = LIF(8, 4)
opt = torch.optim.Adam(layer.parameters(), lr=1e-3)
for batch in range(2):
    layer.reset()
    spikes = (torch.rand(5, 3, 8) > 0.5).float()
    loss = run(layer, spikes).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
