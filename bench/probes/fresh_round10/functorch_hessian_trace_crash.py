# expect: grad_unused
# source: https://github.com/pytorch/functorch/issues/1005
"""A network whose forward pass returns the trace of its own input-Hessian
(Laplacian of a scalar MLP, computed with vmap(hessian(...))), followed by a
vector-Jacobian product of that output with respect to the network parameters,
as used when fitting a Laplacian-type PDE operator."""
import torch
import torch.nn as nn
from torch.func import vmap, hessian

torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(m, 64),
                                 nn.SiLU(),
                                 nn.Linear(64, 64),
                                 nn.SiLU(),
                                 nn.Linear(64, 1))

    def forward(self, x):
        H = vmap(hessian(self.net), in_dims=0)(x)
        trace = vmap(torch.trace, in_dims=0)(H.squeeze(1))
        return trace.unsqueeze(1)


net = Net(m=2)
x = torch.rand(10, 2)
y = net(x)
print("laplacian shape:", tuple(y.shape))

v = torch.rand(10, 1)
d_param = torch.autograd.grad(y, list(net.parameters()), v)  # raises

for (name, p), g in zip(net.named_parameters(), d_param):
    print(name, tuple(p.shape), float(g.norm()))
