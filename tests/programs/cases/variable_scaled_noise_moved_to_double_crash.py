# expect: nonleaf_optimizer
# shape: a leaf made from scaled float32 noise is moved to float64 by a helper: the copy has a
# grad_fn, and the optimizer refuses it
import torch
from torch.autograd import Variable

DEVICE, DTYPE = torch.device("cpu"), torch.float64


def to_device(t):
    return t.to(device=DEVICE, dtype=DTYPE)


torch.manual_seed(0)
target = to_device(torch.randn(1, 8))
image = Variable(torch.randn(1, 8) * 1e-3, requires_grad=True)
image = to_device(image)
opt = torch.optim.Adam([image], lr=0.01)  # raises
for step in range(3):
    loss = (image - target).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
