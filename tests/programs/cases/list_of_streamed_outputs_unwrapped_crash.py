# expect: no_grad_fn
# shape: a predictor streams one output per image from a generator and returns list(...) of them under torch.no_grad(); the caller unwraps the list (isinstance(out, list) is surely true) and backpropagates the first output, which has no graph
import torch
import torch.nn as nn


def stream(model, batch):
    for row in batch:
        yield model(row)


def predict(model, batch):
    with torch.no_grad():
        return list(stream(model, batch))


model = nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
out = predict(model, torch.randn(3, 4))
if isinstance(out, list):
    out = out[0]
optimizer.zero_grad()
out.sum().backward()  # raises
optimizer.step()
