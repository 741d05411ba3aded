# expect: requires_grad_nonleaf
# shape: an attribution script wants the gradient of a gating output and of the input; it sets requires_grad on the computed gate (a non-leaf) before retaining its grad
import torch

torch.manual_seed(0)
x = torch.randn(4, 6, requires_grad=True)
w = torch.randn(6, 6)
gate = torch.sigmoid(x @ w)
gate.requires_grad = True  # raises
gate.retain_grad()
(gate * gate).sum().backward()
print(gate.grad.abs().mean().item(), x.grad.abs().mean().item())
