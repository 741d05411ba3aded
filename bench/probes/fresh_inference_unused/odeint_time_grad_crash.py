# expect: grad_unused
# source: https://github.com/pytorch/pytorch/issues/125532
import torch
import numpy as np


def odeint(func, y0, t, substeps=20):
    """Small stand-in for scipy.integrate.odeint (classic RK4), returns array of shape (len(t), 1)."""
    y = np.atleast_1d(np.asarray(y0, dtype=np.float64))
    out = [y.copy()]
    for i in range(len(t) - 1):
        h = (t[i + 1] - t[i]) / substeps
        tc = t[i]
        for _ in range(substeps):
            k1 = func(y, tc)
            k2 = func(y + 0.5 * h * k1, tc + 0.5 * h)
            k3 = func(y + 0.5 * h * k2, tc + 0.5 * h)
            k4 = func(y + h * k3, tc + h)
            y = y + h / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
            tc = tc + h
        out.append(y.copy())
    return np.stack(out)


def model(y, t):
    k = 0.3
    dydt = -k * y
    return dydt


y0 = 5

t = np.linspace(0, 20, 10)

y = odeint(model, y0, t)
print(y[:, 0])
y = torch.tensor(y, requires_grad=True)
t = torch.tensor(t, requires_grad=True).reshape(-1, 1)
dy = torch.autograd.grad(y[-1, 0], t[-1, 0], torch.ones_like(t[-1, 0]))  # raises

print(dy)
print("expected:", -0.3 * y[-1, 0].item())
