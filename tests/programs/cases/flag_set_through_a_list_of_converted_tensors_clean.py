# expect: clean
# shape: coefficients converted to float64 (a copy each), gathered in a list, and given requires_grad in a loop over that list: the list holds the tensors the names hold, and the loss has a graph
import torch

torch.manual_seed(0)
dtype = torch.float64
x = torch.linspace(-1, 1, 50, dtype=dtype)
y = 3.0 * x ** 2 - x + 0.5

a = torch.randn(1).to(dtype=dtype)
b = torch.randn(1).to(dtype=dtype)
c = torch.randn(1).to(dtype=dtype)
coeffs = [a, b, c]
for p in coeffs:
    p.requires_grad = True

for step in range(20):
    loss = ((a * x ** 2 + b * x + c - y) ** 2).mean()
    loss.backward()
    with torch.no_grad():
        for p in coeffs:
            p -= 0.1 * p.grad
            p.grad.zero_()
