# expect: clean
# source: https://stackoverflow.com/questions/63582590/why-do-we-call-detach-before-calling-numpy-on-a-pytorch-tensor
import numpy as np
import torch

torch.manual_seed(0)

# minimise z = (x . w)^2 w.r.t. w for a fixed x, and keep a record of w
x = torch.rand(4, requires_grad=True)
w = torch.rand(4, requires_grad=True)

lr = 0.1
history = []

for step in range(5):
    y = x @ w
    z = y ** 2
    z.backward()

    with torch.no_grad():
        w -= lr * w.grad
        w.grad.zero_()
        x.grad.zero_()

    print(f"step {step}: z = {z.item():.5f}")

    snapshot = np.asarray(w.detach())
    history.append(snapshot.copy())

history = np.stack(history)
print("w trajectory:")
print(np.round(history, 4))
print("total movement:", np.abs(history[-1] - history[0]).sum())
