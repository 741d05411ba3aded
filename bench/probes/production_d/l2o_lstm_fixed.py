# expect: clean
# source: https://github.com/chenwydj/learning-to-learn-by-gradient-descent-by-gradient-descent
"""Learning to learn by gradient descent by gradient descent (coordinatewise
LSTM optimizer) on a small synthetic classification optimizee.

The optimizee stores its weights as buffers so that `model.parameters()` only
returns the meta-optimizer's own parameters, and the updates proposed by the
LSTM keep their grad_fn for the meta-gradient.
"""
import functools
import operator

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

USE_CUDA = False


def to_var(x, requires_grad=True):
    if USE_CUDA:
        x = x.cuda()
    return x.clone().detach().requires_grad_(requires_grad)


def detach_var(v):
    var = v.detach().requires_grad_(True)
    var.retain_grad()
    return var


class MetaModule(nn.Module):
    """nn.Module whose trainable tensors are registered as buffers."""

    def named_leaves(self):
        return []

    def named_meta_params(self, prefix=""):
        for name, p in self.named_leaves():
            yield prefix + name, p
        for mname, module in self.named_children():
            if isinstance(module, MetaModule):
                yield from module.named_meta_params(prefix + mname + ".")

    def _resolve(self, name):
        *path, leaf = name.split(".")
        mod = functools.reduce(getattr, path, self)
        return mod, leaf

    def set_param(self, name, param):
        mod, leaf = self._resolve(name)
        mod._buffers[leaf] = param

    def apply_update(self, name, update):
        mod, leaf = self._resolve(name)
        mod._buffers[leaf] = mod._buffers[leaf] + update

    def detach_params_(self):
        for name, p in list(self.named_meta_params()):
            self.set_param(name, detach_var(p))


class MetaLinear(MetaModule):
    def __init__(self, fan_in, fan_out):
        super().__init__()
        w = torch.randn(fan_out, fan_in) * (2.0 / fan_in) ** 0.5
        self.register_buffer("weight", to_var(w, requires_grad=True))
        self.register_buffer("bias", to_var(torch.zeros(fan_out), requires_grad=True))

    def named_leaves(self):
        return [("weight", self.weight), ("bias", self.bias)]

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


class SyntheticNet(MetaModule):
    def __init__(self, n_in=10, n_hidden=16, n_out=3):
        super().__init__()
        self.fc1 = MetaLinear(n_in, n_hidden)
        self.fc2 = MetaLinear(n_hidden, n_out)

    def forward(self, batch):
        x, y = batch
        return F.cross_entropy(self.fc2(torch.sigmoid(self.fc1(x))), y)


class SyntheticLoss:
    def __init__(self, n_in=10, n_out=3, batch_size=32, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.W = torch.randn(n_in, n_out, generator=g)
        self.n_in, self.bs, self.g = n_in, batch_size, g

    def sample(self):
        x = torch.randn(self.bs, self.n_in, generator=self.g)
        return x, (x @ self.W).argmax(dim=1)


class Optimizer(nn.Module):
    def __init__(self, preproc=True, hidden_sz=20, preproc_factor=10.0):
        super().__init__()
        self.hidden_sz = hidden_sz
        self.recurs = nn.LSTMCell(2 if preproc else 1, hidden_sz)
        self.recurs2 = nn.LSTMCell(hidden_sz, hidden_sz)
        self.output = nn.Linear(hidden_sz, 1)
        self.preproc = preproc
        self.preproc_factor = preproc_factor
        self.preproc_threshold = np.exp(-preproc_factor)

    def forward(self, inp, hidden, cell):
        if self.preproc:
            inp = inp.data
            inp2 = torch.zeros(inp.size(0), 2)
            keep = (inp.abs() >= self.preproc_threshold).squeeze(1)
            inp2[:, 0][keep] = (torch.log(inp.abs()[keep] + 1e-8) / self.preproc_factor).squeeze()
            inp2[:, 1][keep] = torch.sign(inp[keep]).squeeze()
            inp2[:, 0][~keep] = -1
            inp2[:, 1][~keep] = (float(np.exp(self.preproc_factor)) * inp[~keep]).squeeze()
            inp = inp2
        hidden0, cell0 = self.recurs(inp, (hidden[0], cell[0]))
        hidden1, cell1 = self.recurs2(hidden0, (hidden[1], cell[1]))
        return self.output(hidden1), (hidden0, hidden1), (cell0, cell1)


def do_fit(opt_net, meta_opt, target, optim_it, unroll, out_mul, should_train=True):
    optimizee = SyntheticNet()
    n_params = sum(functools.reduce(operator.mul, p.size(), 1) for _, p in optimizee.named_meta_params())
    hidden_states = [torch.zeros(n_params, opt_net.hidden_sz) for _ in range(2)]
    cell_states = [torch.zeros(n_params, opt_net.hidden_sz) for _ in range(2)]
    all_losses_ever, all_losses = [], None
    for iteration in range(1, optim_it + 1):
        loss = optimizee(target.sample())
        all_losses = loss if all_losses is None else all_losses + loss
        all_losses_ever.append(loss.item())
        names, params = zip(*optimizee.named_meta_params())
        grads = torch.autograd.grad(loss, params, retain_graph=should_train)

        offset = 0
        new_hidden = [torch.zeros_like(h) for h in hidden_states]
        new_cell = [torch.zeros_like(c) for c in cell_states]
        for name, p, g in zip(names, params, grads):
            cur_sz = p.numel()
            gradients = g.detach().view(cur_sz, 1)
            sl = slice(offset, offset + cur_sz)
            updates, hs, cs = opt_net(gradients, [h[sl] for h in hidden_states], [c[sl] for c in cell_states])
            for i in range(2):
                new_hidden[i][sl] = hs[i]
                new_cell[i][sl] = cs[i]
            optimizee.apply_update(name, updates.view_as(p) * out_mul)
            offset += cur_sz

        if iteration % unroll == 0 and should_train:
            meta_opt.zero_grad()
            all_losses.backward()
            meta_opt.step()
            all_losses = None
            optimizee.detach_params_()
            hidden_states = [detach_var(v) for v in new_hidden]
            cell_states = [detach_var(v) for v in new_cell]
        else:
            hidden_states, cell_states = new_hidden, new_cell
    return all_losses_ever


def fit_optimizer(n_epochs=2, n_tests=1, optim_it=6, unroll=3, out_mul=0.1, lr=0.01):
    torch.manual_seed(0)
    opt_net = Optimizer()
    meta_opt = torch.optim.Adam(opt_net.parameters(), lr=lr)
    for epoch in range(n_epochs):
        for seed in range(n_tests):
            losses = do_fit(opt_net, meta_opt, SyntheticLoss(seed=seed), optim_it, unroll, out_mul)
            print(f"epoch {epoch} task {seed}: first loss {losses[0]:.3f} last loss {losses[-1]:.3f}")
    return opt_net


if __name__ == "__main__":
    fit_optimizer()
