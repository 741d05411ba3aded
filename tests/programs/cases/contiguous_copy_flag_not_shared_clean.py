# expect: clean
# shape: contiguous() of a transposed tensor is a copy: turning on its requires_grad leaves the
# original without
import torch

base = torch.zeros(3, 4)
v = base.t()
c = v.contiguous()   # a copy: v is not contiguous
c.requires_grad_()
v.add_(1)            # fine: v does not require grad
print(v.requires_grad, c is v)
