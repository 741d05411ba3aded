# expect: clean
# shape: the same adversarial patch optimized through the model itself, outside the decorated predictor: the scores have a graph
import torch
import torch.nn as nn


def smart_inference_mode():
    def decorate(fn):
        if torch.is_inference_mode_enabled():
            return fn
        return (torch.inference_mode if hasattr(torch, "inference_mode") else torch.no_grad)()(fn)
    return decorate


class Predictor:
    def __init__(self, model):
        self.model = model

    @smart_inference_mode()
    def scores(self, x):
        return self.model(x).sigmoid()


model = nn.Linear(4, 1)
patch = torch.zeros(4, requires_grad=True)
optimizer = torch.optim.Adam([patch], lr=0.01)
predictor = Predictor(model)
images = torch.randn(8, 4)
for step in range(2):
    loss = predictor.model(images + patch).sigmoid().sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
