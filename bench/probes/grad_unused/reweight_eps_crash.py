# expect: grad_unused
# source: https://github.com/danieltan07/learning-to-reweight-examples/issues/5
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call

torch.manual_seed(0)

net = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 2))
opt = torch.optim.SGD(net.parameters(), lr=1e-2)
names = [n for n, _ in net.named_parameters()]

train_x, train_y = torch.randn(128, 20), torch.randint(0, 2, (128,))
val_x, val_y = torch.randn(16, 20), torch.randint(0, 2, (16,))
hyper_lr = 1e-2

for it in range(4):
    idx = torch.randint(0, 128, (32,))
    image, labels = train_x[idx], train_y[idx]

    # Line 4-5: meta step on a copy of the parameters with per-example weights eps
    params = [p.detach().clone().requires_grad_(True) for p in net.parameters()]
    y_f_hat = functional_call(net, dict(zip(names, params)), (image,))
    cost = F.cross_entropy(y_f_hat, labels, reduction="none")
    eps = torch.zeros(cost.size(), requires_grad=True)
    l_f_meta = torch.sum(cost * eps)
    grads = torch.autograd.grad(l_f_meta, params)
    new_params = [p - hyper_lr * g for p, g in zip(params, grads)]

    # Line 8-10: validation loss with the updated parameters, gradient w.r.t. eps
    y_g_hat = functional_call(net, dict(zip(names, new_params)), (val_x,))
    l_g_meta = F.cross_entropy(y_g_hat, val_y)
    grad_eps = torch.autograd.grad(l_g_meta, eps, only_inputs=True)[0]  # raises

    # Line 11: normalise the weights
    w_tilde = torch.clamp(-grad_eps, min=0)
    norm_c = torch.sum(w_tilde)
    w = w_tilde / norm_c if norm_c != 0 else w_tilde

    # Line 12-14: actual update with the reweighted loss
    y_f = net(image)
    l_f = torch.sum(F.cross_entropy(y_f, labels, reduction="none") * w)
    opt.zero_grad()
    l_f.backward()
    opt.step()
    print(it, l_f.item(), l_g_meta.item())
