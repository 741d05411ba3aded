# expect: clean
# source: https://github.com/fastai/course-v3/issues/455
import numpy as np
import torch
from torch import nn

torch.manual_seed(42)


def tensor(*argv): return torch.tensor(argv)


def scatter(xs, ys, width=40):
    # text-mode stand-in for plt.scatter
    xs = np.asarray(xs)
    ys = np.asarray(ys)
    order = np.argsort(xs)
    lo, hi = ys.min(), ys.max()
    for i in order[:: max(1, len(order) // 8)]:
        col = int((ys[i] - lo) / (hi - lo + 1e-8) * width)
        print("%6.2f |%s*" % (xs[i], " " * col))


n = 100
x = torch.ones(n, 2)
x[:, 0].uniform_(-1., 1)
print(x[:5])

a = tensor(3., 2)
y = x @ a + torch.rand(n)
scatter(x[:, 0], y)


def mse(y_hat, y): return ((y_hat - y) ** 2).mean()


a = tensor(-1., 1)
y_hat = x @ a
print(mse(y_hat, y))

a = nn.Parameter(a)
print(a)


def update():
    y_hat = x @ a
    loss = mse(y, y_hat)
    if t % 10 == 0: print(loss)
    loss.backward()
    with torch.no_grad():
        a.sub_(lr * a.grad)
        a.grad.zero_()


lr = 1e-1
for t in range(100): update()

scatter(x[:, 0], y)
with torch.no_grad():
    scatter(x[:, 0], x @ a)
