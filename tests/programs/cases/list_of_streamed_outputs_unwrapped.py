# expect: clean
# shape: the same streamed outputs collected with gradients recorded: the first output has a graph
import torch
import torch.nn as nn


def stream(model, batch):
    for row in batch:
        yield model(row)


def predict(model, batch):
    return list(stream(model, batch))


model = nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
out = predict(model, torch.randn(3, 4))
if isinstance(out, list):
    out = out[0]
optimizer.zero_grad()
out.sum().backward()
optimizer.step()
