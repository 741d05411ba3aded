# expect: clean
# source: https://github.com/arthurdouillard/deepcourse/issues/11
# Autograd notebook: fit a line y = a*x + b with plain tensors and autograd,
# then look at the loss curve and the fitted line.
import numpy as np
import torch

torch.manual_seed(0)
np.random.seed(0)

n = 200
x = torch.linspace(-3, 3, n)
y = 2.5 * x - 1.0 + 0.3 * torch.randn(n)

a = torch.randn(1, requires_grad=True)
b = torch.zeros(1, requires_grad=True)

lr = 0.05
nb_epochs = 60
epochs = []
losses = []

for epoch in range(nb_epochs):
    y_pred = a * x + b
    loss = ((y_pred - y) ** 2).mean()

    loss.backward()
    with torch.no_grad():
        a -= lr * a.grad
        b -= lr * b.grad
    a.grad.zero_()
    b.grad.zero_()

    epochs.append(epoch)
    losses.append(loss.detach())

    if epoch % 10 == 0:
        print(f"epoch {epoch:3d}  loss {loss.item():.4f}  a={a.item():.3f}  b={b.item():.3f}")


def plot(xs, ys, label):
    # poor man's plt.plot: turn both series into arrays and print a few points
    xs = np.asarray(xs, dtype=np.float64)
    ys = np.asarray(ys, dtype=np.float64)
    step = max(1, len(xs) // 6)
    print(label, [(round(float(u), 2), round(float(v), 4)) for u, v in zip(xs[::step], ys[::step])])
    return xs, ys


plt_x, plt_y = plot(epochs, losses, "Loss")
print("final loss", plt_y[-1])

with torch.no_grad():
    fitted = a * x + b
plot(x, fitted, "Fit")
print("learned a, b:", a.item(), b.item())
