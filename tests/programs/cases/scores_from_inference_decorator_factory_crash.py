# expect: no_grad_fn
# shape: a predictor's method is decorated by the project's own decorator factory, which wraps it in torch.inference_mode() (or no_grad) when called; an adversarial patch is optimized through those scores, which have no graph
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
    loss = predictor.scores(images + patch).sum()
    optimizer.zero_grad()
    loss.backward()  # raises
    optimizer.step()
