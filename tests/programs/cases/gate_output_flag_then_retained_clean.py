# expect: clean
# shape: the gate already requires grad; retain_grad alone keeps its gradient
import torch

torch.manual_seed(0)
x = torch.randn(4, 6, requires_grad=True)
w = torch.randn(6, 6)
gate = torch.sigmoid(x @ w)
gate.retain_grad()
(gate * gate).sum().backward()
print(gate.grad.abs().mean().item(), x.grad.abs().mean().item())
