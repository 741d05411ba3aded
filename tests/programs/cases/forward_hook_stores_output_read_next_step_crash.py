# expect: freed_graph
# shape: a forward hook stores a layer's output in a dict; the next step's loss reads it, with the graph the previous backward freed
import torch
import torch.nn as nn

feats = {}


def save_output(module, inputs, output):
    feats["h"] = output


model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
model[0].register_forward_hook(save_output)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model(torch.randn(2, 4))
for step in range(3):
    x = torch.randn(2, 4)
    prev = feats["h"]
    out = model(x)
    loss = out.mean() + prev.pow(2).mean()
    opt.zero_grad()
    loss.backward()  # raises
    opt.step()
