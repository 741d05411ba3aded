# expect: clean
# shape: the same projection rescaled in place before the einsum that saves it
import torch

w = torch.randn(4, 4, requires_grad=True)
proj = torch.randn(4, 3)
with torch.no_grad():
    proj.div_(proj.norm())
x = torch.randn(2, 4) @ w
y = torch.einsum("bi,ij->bj", x, proj)
y.pow(2).sum().backward()
