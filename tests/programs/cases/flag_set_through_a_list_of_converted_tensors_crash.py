# expect: no_grad_fn
# shape: the twin of flag_set_through_a_list_of_converted_tensors_clean.py whose list holds float32 copies of the coefficients: requires_grad is set on the copies, the coefficients the loss uses stay without it, and the loss has no graph
import torch

torch.manual_seed(0)
dtype = torch.float64
x = torch.linspace(-1, 1, 50, dtype=dtype)
y = 3.0 * x ** 2 - x + 0.5

a = torch.randn(1).to(dtype=dtype)
b = torch.randn(1).to(dtype=dtype)
c = torch.randn(1).to(dtype=dtype)
coeffs = [t.to(torch.float32) for t in (a, b, c)]
for p in coeffs:
    p.requires_grad = True

for step in range(20):
    loss = ((a * x ** 2 + b * x + c - y) ** 2).mean()
    loss.backward()  # raises
    with torch.no_grad():
        for p in coeffs:
            p -= 0.1 * p.grad
            p.grad.zero_()
