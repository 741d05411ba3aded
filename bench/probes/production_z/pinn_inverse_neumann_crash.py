# expect: freed_graph
# source: https://github.com/lululxvi/deepxde/issues/1612
"""Physics-informed inverse problem in a small DeepXDE-like framework.

A steady reaction-diffusion profile y(x) on [0, L] satisfies y'' - y / L_d^2 = 0.
The unknown surface flux C1 enters only through the Neumann condition at x = 0
(dy/dn = C1 / (2 D)); it is learned together with the network from a handful of
observations.  The framework mirrors DeepXDE's structure: geometry, PDE data,
IC/BC classes with cached boundary values, a Model with compile()/train() and a
VariableValue callback.
"""
from functools import wraps

import numpy as np
import torch
import torch.nn as nn

L_D = 0.5
D = 0.8
C1_TRUE = 0.6


def isclose(a, b):
    return np.isclose(a, b, rtol=0, atol=1e-6)


def npfunc_range_autocache(func):
    """Call a function on a range of the input array; results cached by id(X)."""
    cache = {}

    @wraps(func)
    def wrapper_cache(X, beg, end, _):
        key = (id(X), beg, end)
        if key not in cache:
            cache[key] = func(X[beg:end])
        return cache[key]

    return wrapper_cache


def return_tensor(func):
    @wraps(func)
    def wrapper(x):
        out = func(x)
        if not torch.is_tensor(out):
            out = torch.as_tensor(out, dtype=torch.float32)
        return out * torch.ones(x.shape[0], 1)

    return wrapper


def grad(y, x):
    return torch.autograd.grad(y, x, grad_outputs=torch.ones_like(y), create_graph=True)[0]


class Interval:
    def __init__(self, l, r):
        self.l, self.r = l, r

    def on_boundary(self, x):
        return isclose(x, self.l) | isclose(x, self.r)

    def boundary_normal(self, x):
        return -isclose(x, self.l).astype(np.float32) + isclose(x, self.r).astype(np.float32)

    def uniform_points(self, n):
        return np.linspace(self.l, self.r, n, dtype=np.float32)[:, None]


class BC:
    def __init__(self, geom, on_boundary):
        self.geom = geom
        self.on_boundary = lambda x, on: np.array([on_boundary(x[i], on[i]) for i in range(len(x))])

    def filter(self, X):
        return X[self.on_boundary(X, self.geom.on_boundary(X))]

    def normal_derivative(self, X, inputs, outputs, beg, end):
        dydx = grad(outputs, inputs)[beg:end]
        n = torch.as_tensor(self.geom.boundary_normal(X[beg:end]))
        return (dydx * n).sum(1, keepdim=True)


class NeumannBC(BC):
    def __init__(self, geom, func, on_boundary):
        super().__init__(geom, on_boundary)
        self.func = npfunc_range_autocache(return_tensor(func))

    def error(self, X, inputs, outputs, beg, end):
        values = self.func(X, beg, end, None)
        return self.normal_derivative(X, inputs, outputs, beg, end) - values


class PointSetBC:
    def __init__(self, points, values):
        self.points = points.astype(np.float32)
        self.values = torch.as_tensor(values, dtype=torch.float32)

    def filter(self, X):
        return self.points

    def error(self, X, inputs, outputs, beg, end):
        return outputs[beg:end] - self.values


class PDE:
    def __init__(self, geom, pde, bcs, num_domain, anchors):
        self.geom, self.pde, self.bcs = geom, pde, bcs
        domain = geom.uniform_points(num_domain)
        bc_points = [bc.filter(anchors) for bc in bcs]
        self.num_bcs = [len(p) for p in bc_points]
        self.train_x = np.vstack(bc_points + [domain])

    def losses(self, inputs, outputs):
        f = self.pde(inputs, outputs)
        bcs_start = np.cumsum([0] + self.num_bcs)
        losses = [torch.mean(f[bcs_start[-1]:] ** 2)]
        for i, bc in enumerate(self.bcs):
            err = bc.error(self.train_x, inputs, outputs, bcs_start[i], bcs_start[i + 1])
            losses.append(torch.mean(err ** 2))
        return losses


class FNN(nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.linears = nn.ModuleList([nn.Linear(a, b) for a, b in zip(layers[:-1], layers[1:])])
        for lin in self.linears:
            nn.init.xavier_normal_(lin.weight)
            nn.init.zeros_(lin.bias)

    def forward(self, x):
        for lin in self.linears[:-1]:
            x = torch.tanh(lin(x))
        return self.linears[-1](x)


class VariableValue:
    def __init__(self, var_list, period=1):
        self.var_list, self.period, self.history = var_list, period, []

    def on_epoch_end(self, step):
        if step % self.period == 0:
            self.history.append([v.item() for v in self.var_list])


class Model:
    def __init__(self, data, net):
        self.data, self.net = data, net

    def compile(self, optimizer, lr, external_trainable_variables=()):
        params = list(self.net.parameters()) + list(external_trainable_variables)
        self.opt = torch.optim.Adam(params, lr=lr) if optimizer == "adam" else torch.optim.SGD(params, lr=lr)
        self.sched = torch.optim.lr_scheduler.ExponentialLR(self.opt, gamma=0.999)
        self.loss_weights = [1.0] * (1 + len(self.data.bcs))

    def train_step(self):
        inputs = torch.as_tensor(self.data.train_x).requires_grad_(True)
        outputs = self.net(inputs)
        losses = self.data.losses(inputs, outputs)
        total_loss = sum(w * l for w, l in zip(self.loss_weights, losses))
        self.opt.zero_grad()
        total_loss.backward()  # raises
        self.opt.step()
        self.sched.step()
        return [l.item() for l in losses]

    def train(self, iterations, callbacks=()):
        history = []
        for step in range(iterations):
            history.append(self.train_step())
            for cb in callbacks:
                cb.on_epoch_end(step)
        return history


def main():
    torch.manual_seed(0)
    np.random.seed(0)
    geom = Interval(0.0, 1.0)
    C1 = torch.tensor(0.1, requires_grad=True)  # the parameter to be solved

    def pde(x, y):
        dy_xx = grad(grad(y, x), x)
        return dy_xx - y / L_D ** 2

    def boundary(x, on_boundary):
        return on_boundary and isclose(x[0], 0.0)

    obs_x = np.linspace(0.1, 1.0, 6, dtype=np.float32)[:, None]
    exact = lambda x: C1_TRUE * L_D / (2 * D) * np.cosh((1.0 - x) / L_D) / np.sinh(1.0 / L_D)
    bc = NeumannBC(geom, lambda x: C1 / (2 * D), boundary)
    observe = PointSetBC(obs_x, exact(obs_x))
    data = PDE(geom, pde, [bc, observe], num_domain=24, anchors=np.array([[0.0], [1.0]], dtype=np.float32))
    net = FNN([1, 20, 20, 1])
    model = Model(data, net)
    variable = VariableValue([C1], period=10)
    model.compile("adam", lr=1e-3, external_trainable_variables=[C1])
    history = model.train(iterations=60, callbacks=[variable])
    print("final losses", np.round(history[-1], 5), "C1 estimate", variable.history[-1])


if __name__ == "__main__":
    main()
