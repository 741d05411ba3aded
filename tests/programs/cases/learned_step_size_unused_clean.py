# expect: clean
# shape: the same meta-learner asks only for the gradients of the parameters the loss uses
import torch
import torch.nn as nn
import torch.nn.functional as F


class MetaLearner:
    def __init__(self):
        self.model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
        self.log_lr = torch.zeros(1, requires_grad=True)

    def inner_loss(self, x, y):
        return F.mse_loss(self.model(x), y)

    def adapt(self, x, y):
        params = list(self.model.parameters())
        grads = torch.autograd.grad(self.inner_loss(x, y), params)
        return [p - self.log_lr.exp() * g for p, g in zip(params, grads)]


learner = MetaLearner()
fast = learner.adapt(torch.randn(16, 4), torch.randn(16, 1))
print(len(fast))
