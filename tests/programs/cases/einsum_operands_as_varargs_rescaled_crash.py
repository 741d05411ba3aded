# expect: inplace_version
# shape: `torch.einsum(eq, x, proj)` with its operands as varargs saves both; rescaling `proj` in place (under no_grad) before backward changes a saved tensor
import torch

w = torch.randn(4, 4, requires_grad=True)
proj = torch.randn(4, 3)
x = torch.randn(2, 4) @ w
y = torch.einsum("bi,ij->bj", x, proj)
with torch.no_grad():
    proj.div_(proj.norm())
y.pow(2).sum().backward()  # raises
