# expect: nonleaf_optimizer
# source: https://github.com/pytorch/tutorials/issues/3716
import math

import torch
import torch.nn.functional as F
from torch import optim

torch.manual_seed(0)

n_train, n_valid = 512, 128
prototypes = torch.rand(10, 784)
y_all = torch.randint(0, 10, (n_train + n_valid,))
x_all = (prototypes[y_all] + 0.3 * torch.randn(n_train + n_valid, 784)).clamp(0, 1)
x_train, y_train = x_all[:n_train], y_all[:n_train]
x_valid, y_valid = x_all[n_train:], y_all[n_train:]

weights = torch.randn(784, 10, requires_grad=True) / math.sqrt(784)
bias = torch.zeros(10, requires_grad=True)


def model(xb):
    return xb @ weights + bias


def accuracy(out, yb):
    preds = torch.argmax(out, dim=1)
    return (preds == yb).float().mean()


loss_func = F.cross_entropy
bs = 64
lr = 0.5
epochs = 2

opt = optim.SGD([weights, bias], lr=lr)  # raises

for epoch in range(epochs):
    for i in range((n_train - 1) // bs + 1):
        start_i = i * bs
        end_i = start_i + bs
        xb = x_train[start_i:end_i]
        yb = y_train[start_i:end_i]
        pred = model(xb)
        loss = loss_func(pred, yb)

        loss.backward()
        opt.step()
        opt.zero_grad()

    with torch.no_grad():
        valid_out = model(x_valid)
        print(epoch, loss_func(valid_out, y_valid).item(), accuracy(valid_out, y_valid).item())
