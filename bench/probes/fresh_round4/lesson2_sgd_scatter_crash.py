# expect: numpy_requires_grad
# source: https://github.com/fastai/course-v3/pull/497
import numpy as np
import torch
from torch import nn

torch.manual_seed(42)

n = 100
x = torch.ones(n, 2)
x[:, 0].uniform_(-1.0, 1.0)
a_true = torch.tensor([3.0, 2.0])
y = x @ a_true + torch.rand(n)


def mse(y_hat, y):
    return ((y_hat - y) ** 2).mean()


class Axes:
    def __init__(self):
        self.series = []

    def scatter(self, xs, ys, label=None):
        xs = np.asarray(xs, dtype=np.float32)
        ys = np.asarray(ys, dtype=np.float32)  # raises
        self.series.append((label, xs, ys))
        return len(self.series)


def summarize(ax):
    for label, xs, ys in ax.series:
        order = np.argsort(xs)
        print(f"{label}: n={len(xs)} first={ys[order][0]:.3f} last={ys[order][-1]:.3f}")


a = nn.Parameter(torch.tensor([-1.0, 1.0]))
lr = 1e-1


def update():
    y_hat = x @ a
    loss = mse(y, y_hat)
    loss.backward()
    with torch.no_grad():
        a.sub_(lr * a.grad)
        a.grad.zero_()
    return loss.item()


for t in range(100):
    loss = update()
    if t % 25 == 0:
        print(f"step {t}: loss {loss:.4f}")

ax = Axes()
ax.scatter(x[:, 0], y, label="data")
ax.scatter(x[:, 0], x @ a, label="fit")
summarize(ax)
print("learned a:", a.data.tolist())
