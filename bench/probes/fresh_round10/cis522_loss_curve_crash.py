# expect: numpy_requires_grad
# source: https://github.com/CIS-522/course-content/pull/2
"""W2D1-style tutorial cell: fit a small MLP on a toy regression problem with
plain SGD for a few epochs, then turn the recorded losses into an array to draw
the learning curve (rendered here as a text sparkline)."""
import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(0)
np.random.seed(0)

# toy data: y = sin(x) + noise
X = torch.linspace(-3, 3, 200).unsqueeze(1)
y = torch.sin(X) + 0.1 * torch.randn_like(X)

net = nn.Sequential(nn.Linear(1, 32), nn.ReLU(), nn.Linear(32, 1))
criterion = nn.MSELoss()
optimizer = torch.optim.SGD(net.parameters(), lr=0.05)

num_epochs = 60
losses = []
for epoch in range(num_epochs):
    optimizer.zero_grad()
    pred = net(X)
    l = criterion(pred, y)
    l.backward()
    optimizer.step()
    losses.append(l)


def sparkline(values, width=60):
    bars = " .:-=+*#%@"
    v = np.asarray(values, dtype=float)
    v = (v - v.min()) / (np.ptp(v) + 1e-12)
    idx = np.linspace(0, len(v) - 1, min(width, len(v))).astype(int)
    return "".join(bars[int(x * (len(bars) - 1))] for x in v[idx])


# plt.plot(range(num_epochs), losses) in the notebook
curve = np.array(losses)  # raises
print("epochs:", len(range(num_epochs)))
print("loss curve:", sparkline(curve))
print("final loss: %.4f" % curve[-1])
