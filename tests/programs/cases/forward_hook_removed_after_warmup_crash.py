# expect: freed_graph
# shape: a hook removed after a warm-up call: its stored activation is the warm-up's, whose graph the first step's backward frees
import torch
import torch.nn as nn

feats = {}


def keep(module, inputs, output):
    feats["h"] = output


model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
handle = model[1].register_forward_hook(keep)
model(torch.randn(2, 4))  # warm-up: records the shapes
handle.remove()
for step in range(3):
    out = model(torch.randn(2, 4))
    loss = out.mean() + 1e-3 * feats["h"].pow(2).mean()
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
