# expect: requires_grad_nonleaf
# source: https://discuss.pytorch.org/t/how-to-define-a-leaf-tensor-in-pytorch-0-4-1/28461
"""Fit a cubic polynomial with hand-rolled gradient descent; the coefficients
are created as standalone tensors and moved to the compute device/dtype
before training."""
import torch

torch.manual_seed(0)
device = torch.device("cpu")
dtype = torch.float64

x = torch.linspace(-2, 2, 200, dtype=dtype, device=device)
y_true = 0.5 * x ** 3 - x ** 2 + 2.0 * x + 1.0 + 0.1 * torch.randn(200, dtype=dtype, device=device)

# learnable coefficients
a = torch.randn(1, requires_grad=True).to(device=device, dtype=dtype)
b = torch.randn(1, requires_grad=True).to(device=device, dtype=dtype)
c = torch.randn(1, requires_grad=True).to(device=device, dtype=dtype)
d = torch.randn(1, requires_grad=True).to(device=device, dtype=dtype)
coeffs = [a, b, c, d]

print("is_leaf:", [p.is_leaf for p in coeffs])
for p in coeffs:
    p.requires_grad = True  # raises

lr = 0.01
for step in range(300):
    y_pred = a * x ** 3 + b * x ** 2 + c * x + d
    loss = ((y_pred - y_true) ** 2).mean()
    loss.backward()
    with torch.no_grad():
        for p in coeffs:
            p -= lr * p.grad
            p.grad.zero_()
    if step % 100 == 0:
        print(f"step {step}: loss {loss.item():.4f}")

print("fitted:", [round(p.item(), 3) for p in coeffs])
