# expect: clean
# shape: a learning-to-reweight step replaces each weight of a meta-layer, by name through setattr, with a function of per-sample weights `eps`; the validation loss then depends on eps
import torch
import torch.nn as nn
import torch.nn.functional as F


class MetaLinear(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        init = nn.Linear(n_in, n_out)
        self.register_buffer("weight", init.weight.data.clone().requires_grad_())
        self.register_buffer("bias", init.bias.data.clone().requires_grad_())

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


def update(module, grads, lr):
    for (name, value), grad in zip(list(module.named_buffers()), grads):
        setattr(module, name, value - lr * grad)


x, y = torch.randn(16, 5), torch.randn(16, 1)
xv, yv = torch.randn(8, 5), torch.randn(8, 1)
for step in range(2):
    net = MetaLinear(5, 1)
    eps = torch.zeros(16, requires_grad=True)
    cost = ((net(x) - y) ** 2).squeeze(1)
    grads = torch.autograd.grad((cost * eps).sum(), [net.weight, net.bias], create_graph=True)
    update(net, grads, 0.1)
    val = F.mse_loss(net(xv), yv)
    grad_eps, = torch.autograd.grad(val, eps)
    print(step, grad_eps.abs().sum().item())
