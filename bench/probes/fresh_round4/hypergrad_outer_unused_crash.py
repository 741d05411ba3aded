# expect: grad_unused
# source: https://github.com/prolearner/hypertorch/issues/3
import torch
import torch.nn.functional as F

torch.manual_seed(0)

n_tr, n_val, d = 60, 40, 8
w_true = torch.randn(d, 1)
x_tr, x_val = torch.randn(n_tr, d), torch.randn(n_val, d)
y_tr = x_tr @ w_true + 0.5 * torch.randn(n_tr, 1)
y_val = x_val @ w_true + 0.5 * torch.randn(n_val, 1)

log_l2 = torch.tensor([-2.0], requires_grad=True)
hparams = [log_l2]
outer_opt = torch.optim.SGD(hparams, lr=0.5)


def train_loss_f(params, hparams):
    w = params[0]
    return F.mse_loss(x_tr @ w, y_tr) + 0.5 * hparams[0].exp() * (w ** 2).sum()


def val_loss_f(params, hparams):
    return F.mse_loss(x_val @ params[0], y_val)


def gd_map(params, hparams, lr=0.1):
    grads = torch.autograd.grad(train_loss_f(params, hparams), params, create_graph=True)
    return [w - lr * g for w, g in zip(params, grads)]


def get_outer_gradients(outer_loss, params, hparams, retain_graph=True):
    grad_outer_w = torch.autograd.grad(outer_loss, params, retain_graph=retain_graph)
    grad_outer_hparams = torch.autograd.grad(outer_loss, hparams, retain_graph=retain_graph)  # raises
    return grad_outer_w, grad_outer_hparams


def fixed_point(params, hparams, K=20):
    params = [w.detach().requires_grad_(True) for w in params]
    o_loss = val_loss_f(params, hparams)
    grad_outer_w, grad_outer_hparams = get_outer_gradients(o_loss, params, hparams)
    w_mapped = gd_map(params, hparams)
    vs = [torch.zeros_like(w) for w in params]
    for _ in range(K):
        vs_new = torch.autograd.grad(w_mapped, params, grad_outputs=vs, retain_graph=True)
        vs = [v + gow for v, gow in zip(vs_new, grad_outer_w)]
    grads = torch.autograd.grad(w_mapped, hparams, grad_outputs=vs)
    return [g + v for g, v in zip(grads, grad_outer_hparams)]


for outer_step in range(5):
    w = [torch.zeros(d, 1, requires_grad=True)]
    for _ in range(100):
        w = [p.detach().requires_grad_(True) for p in gd_map(w, hparams)]
    outer_opt.zero_grad()
    hypergrads = fixed_point(w, hparams)
    for h, g in zip(hparams, hypergrads):
        h.grad = g
    outer_opt.step()
    print(f"outer {outer_step}: val {val_loss_f(w, hparams).item():.4f} l2 {log_l2.exp().item():.4f}")
