# expect: requires_grad_nonleaf
# source: https://github.com/pytorch/pytorch/pull/163263
# Fit a low-rank factor c so that c @ c.T matches the elementwise square of a,
# then take one step on a itself with the fitted factor held fixed.
import torch

torch.manual_seed(0)

a = torch.randn(3, 3, device="cpu", requires_grad=True)
b = torch.pow(a, 2)
print(b)

# b is the target for the factorisation below; it should not carry gradients
b.requires_grad = False  # raises

c = torch.randn(3, 2, requires_grad=True)
opt_c = torch.optim.Adam([c], lr=0.05)
for step in range(200):
    opt_c.zero_grad()
    target = (b + b.T) / 2
    loss = ((c @ c.T - target) ** 2).mean()
    loss.backward()
    opt_c.step()
    if step % 50 == 0:
        print(step, loss.item())

print("factor residual:", loss.item())

# now move a towards the fitted low-rank structure
opt_a = torch.optim.SGD([a], lr=0.1)
approx = (c @ c.T).detach()
for step in range(20):
    opt_a.zero_grad()
    sym = (a ** 2 + (a ** 2).T) / 2
    loss_a = ((sym - approx) ** 2).mean()
    loss_a.backward()
    opt_a.step()

print("a residual:", loss_a.item())
print("grad of a is populated:", a.grad is not None)
