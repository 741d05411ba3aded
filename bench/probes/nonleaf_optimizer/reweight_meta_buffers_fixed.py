# expect: clean
# source: https://github.com/danieltan07/learning-to-reweight-examples/issues/4
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd import Variable

hyperparameters = {
    'lr': 1e-2,
    'momentum': 0.9,
    'batch_size': 32,
    'num_iterations': 6,
    'n_features': 10,
    'double_precision': True,
}


def to_var(x, requires_grad=True):
    return Variable(x, requires_grad=requires_grad)


class MetaModule(nn.Module):
    # adopted from: Adrien Ecoffet https://github.com/AdrienLE
    def params(self):
        for name, param in self.named_params(self):
            yield param

    def named_leaves(self):
        return []

    def named_params(self, curr_module=None, memo=None, prefix=''):
        if memo is None:
            memo = set()
        if hasattr(curr_module, 'named_leaves'):
            for name, p in curr_module.named_leaves():
                if p is not None and p not in memo:
                    memo.add(p)
                    yield prefix + ('.' if prefix else '') + name, p
        else:
            for name, p in curr_module._parameters.items():
                if p is not None and p not in memo:
                    memo.add(p)
                    yield prefix + ('.' if prefix else '') + name, p
        for mname, module in curr_module.named_children():
            submodule_prefix = prefix + ('.' if prefix else '') + mname
            for name, p in self.named_params(module, memo, submodule_prefix):
                yield name, p

    def update_params(self, lr_inner, source_params):
        for tgt, grad in zip(self.named_params(self), source_params):
            name_t, param_t = tgt
            self.set_param(self, name_t, param_t - lr_inner * grad)

    def set_param(self, curr_mod, name, param):
        if '.' in name:
            n = name.split('.')
            module_name, rest = n[0], '.'.join(n[1:])
            for name, mod in curr_mod.named_children():
                if module_name == name:
                    self.set_param(mod, rest, param)
                    break
        else:
            setattr(curr_mod, name, param)


class MetaLinear(MetaModule):
    def __init__(self, *args, **kwargs):
        super().__init__()
        ignore = nn.Linear(*args, **kwargs)
        self.register_buffer('weight', to_var(ignore.weight.data, requires_grad=True))
        self.register_buffer('bias', to_var(ignore.bias.data, requires_grad=True))

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)

    def named_leaves(self):
        return [('weight', self.weight), ('bias', self.bias)]


class MetaMLP(MetaModule):
    def __init__(self, n_in, n_hidden=32, **kwargs):
        super().__init__()
        self.fc1 = MetaLinear(n_in, n_hidden, **kwargs)
        self.fc2 = MetaLinear(n_hidden, 1, **kwargs)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x))).squeeze(-1)


def make_data(n, n_features, noise_frac, rng):
    X = rng.randn(n, n_features)
    w = np.linspace(-1.0, 1.0, n_features)
    y = (X @ w > 0).astype(np.float64)
    flip = rng.rand(n) < noise_frac
    y[flip] = 1.0 - y[flip]
    return torch.from_numpy(X), torch.from_numpy(y)


def build_model():
    dtype = torch.float64 if hyperparameters['double_precision'] else torch.float32
    net = MetaMLP(hyperparameters['n_features'], dtype=dtype)
    opt = torch.optim.SGD(net.params(), lr=hyperparameters["lr"], momentum=hyperparameters["momentum"])
    return net, opt


def train_lre(X_train, y_train, X_val, y_val):
    net, opt = build_model()
    dtype = next(net.params()).dtype
    bs = hyperparameters['batch_size']
    rng = np.random.RandomState(1)
    for i in range(hyperparameters['num_iterations']):
        idx = rng.choice(len(X_train), bs, replace=False)
        image, labels = X_train[idx].to(dtype), y_train[idx].to(dtype)

        meta_net = MetaMLP(hyperparameters['n_features']).to(dtype)
        meta_net.load_state_dict(net.state_dict())

        y_f_hat = meta_net(image)
        cost = F.binary_cross_entropy_with_logits(y_f_hat, labels, reduction='none')
        eps = to_var(torch.zeros(cost.size(), dtype=dtype))
        l_f_meta = torch.sum(cost * eps)
        meta_net.zero_grad()
        grads = torch.autograd.grad(l_f_meta, list(meta_net.params()), create_graph=True)
        meta_net.update_params(hyperparameters['lr'], source_params=grads)

        y_g_hat = meta_net(X_val.to(dtype))
        l_g_meta = F.binary_cross_entropy_with_logits(y_g_hat, y_val.to(dtype))
        grad_eps = torch.autograd.grad(l_g_meta, eps, only_inputs=True)[0]

        w_tilde = torch.clamp(-grad_eps, min=0)
        norm_c = torch.sum(w_tilde)
        w = w_tilde / norm_c if norm_c != 0 else w_tilde

        y_f_hat = net(image)
        cost = F.binary_cross_entropy_with_logits(y_f_hat, labels, reduction='none')
        l_f = torch.sum(cost * w)
        opt.zero_grad()
        l_f.backward()
        opt.step()
        print(f"iter {i}: weighted loss {l_f.item():.4f}  meta loss {l_g_meta.item():.4f}")
    return net


if __name__ == "__main__":
    torch.manual_seed(0)
    rng = np.random.RandomState(0)
    X_train, y_train = make_data(512, hyperparameters['n_features'], 0.4, rng)
    X_val, y_val = make_data(64, hyperparameters['n_features'], 0.0, rng)
    train_lre(X_train, y_train, X_val, y_val)
