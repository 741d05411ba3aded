# expect: clean
# shape: the same hook kept: every call stores a fresh activation
import torch
import torch.nn as nn

feats = {}


def keep(module, inputs, output):
    feats["h"] = output


model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
handle = model[1].register_forward_hook(keep)
model(torch.randn(2, 4))  # warm-up: records the shapes
for step in range(3):
    out = model(torch.randn(2, 4))
    loss = out.mean() + 1e-3 * feats["h"].pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
