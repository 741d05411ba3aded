# expect: clean
# source: https://github.com/pytorch/tutorials/pull/3717
"""'What is torch.nn really?' style walkthrough: a logistic-regression digit
classifier written from scratch (weights, bias, log_softmax, nll), then
refactored to use torch.optim, trained on synthetic 28x28 inputs."""
import math

import torch
from torch import optim

torch.manual_seed(0)
n, c = 512, 10
x_train = torch.rand(n, 784)
y_train = torch.randint(0, c, (n,))
bs, lr, epochs = 64, 0.1, 2

# Xavier-style initialisation: scale by 1/sqrt(n_in)
weights = torch.randn(784, 10) / math.sqrt(784)
weights.requires_grad_()
bias = torch.zeros(10, requires_grad=True)


def log_softmax(x):
    return x - x.exp().sum(-1).log().unsqueeze(-1)


def model(xb):
    return log_softmax(xb @ weights + bias)


def nll(input, target):
    return -input[range(target.shape[0]), target].mean()


def accuracy(out, yb):
    return (torch.argmax(out, dim=1) == yb).float().mean()


loss_func = nll
xb, yb = x_train[0:bs], y_train[0:bs]
print("initial loss", loss_func(model(xb), yb).item(), "acc", accuracy(model(xb), yb).item())

opt = optim.SGD([weights, bias], lr=lr)

for epoch in range(epochs):
    for i in range((n - 1) // bs + 1):
        start_i = i * bs
        xb = x_train[start_i:start_i + bs]
        yb = y_train[start_i:start_i + bs]
        loss = loss_func(model(xb), yb)
        loss.backward()
        opt.step()
        opt.zero_grad()
    print(f"epoch {epoch}: loss {loss_func(model(xb), yb).item():.4f}")
