# expect: freed_graph
# source: https://github.com/lululxvi/deepxde/pull/2077
"""Inverse diffusion problem with an unknown constant in the initial condition.

    u_t = u_xx - e^{-t} (sin(pi x) - pi^2 sin(pi x)),   x in [-1, 1], t in [0, 1]
    u(x, 0) = sin(C x),  u(-1, t) = u(1, t) = 0

C is learned from a few observations of u at t = 1 (true C = pi).  The solver
below is a trimmed DeepXDE-style stack (geometry, IC/BC classes with cached
function values, TimePDE data, Model.compile/train, callbacks), PyTorch backend.
"""
from functools import wraps

import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(0)
np.random.seed(0)
REAL = torch.float32


# ------------------------------------------------------------------ geometry
class Interval:
    def __init__(self, l, r):
        self.l, self.r = l, r

    def on_boundary(self, x):
        return np.isclose(x, self.l) | np.isclose(x, self.r)


class TimeDomain(Interval):
    def on_initial(self, t):
        return np.isclose(t, self.l)


class GeometryXTime:
    def __init__(self, geometry, timedomain):
        self.geometry, self.timedomain = geometry, timedomain

    def random_points(self, n):
        x = np.random.uniform(self.geometry.l, self.geometry.r, (n, 1))
        t = np.random.uniform(self.timedomain.l, self.timedomain.r, (n, 1))
        return np.hstack((x, t)).astype(np.float32)

    def random_boundary_points(self, n):
        x = np.random.choice([self.geometry.l, self.geometry.r], (n, 1))
        t = np.random.uniform(self.timedomain.l, self.timedomain.r, (n, 1))
        return np.hstack((x, t)).astype(np.float32)

    def random_initial_points(self, n):
        x = np.random.uniform(self.geometry.l, self.geometry.r, (n, 1))
        return np.hstack((x, np.full((n, 1), self.timedomain.l))).astype(np.float32)

    def on_boundary(self, x):
        return self.geometry.on_boundary(x[:, 0])

    def on_initial(self, x):
        return self.timedomain.on_initial(x[:, 1])


# ------------------------------------------------------------------ ic / bc
def npfunc_range_autocache(func):
    """Call a function on a range of X.  For the pytorch backend the results
    are cached based on the id of X (the training points are fixed)."""
    cache = {}

    @wraps(func)
    def wrapper_nocache(X, beg, end, _):
        return func(X[beg:end])

    @wraps(func)
    def wrapper_cache(X, beg, end, _):
        key = (id(X), beg, end)
        if key not in cache:
            cache[key] = func(X[beg:end])
        return cache[key]

    return wrapper_cache


class DirichletBC:
    def __init__(self, geom, func, on_boundary, component=0):
        self.geom = geom
        self.func = npfunc_range_autocache(func)
        self.on_boundary = on_boundary
        self.component = component

    def collocation_points(self, X):
        return X[self.on_boundary(X, self.geom.on_boundary(X))]

    def error(self, X, inputs, outputs, beg, end, aux_var=None):
        values = self.func(X, beg, end, aux_var)
        return outputs[beg:end, self.component:self.component + 1] - values


class IC:
    """Initial conditions: y([x, t0]) = func([x, t0])."""

    def __init__(self, geom, func, on_initial, component=0):
        self.geom = geom
        self.func = npfunc_range_autocache(func)
        self.on_initial = on_initial
        self.component = component

    def collocation_points(self, X):
        return X[self.on_initial(X, self.geom.on_initial(X))]

    def error(self, X, inputs, outputs, beg, end, aux_var=None):
        values = self.func(X, beg, end, aux_var)
        return outputs[beg:end, self.component:self.component + 1] - values


class PointSetBC:
    def __init__(self, points, values, component=0):
        self.points = np.asarray(points, dtype=np.float32)
        self.values = torch.as_tensor(values, dtype=REAL)
        self.component = component

    def collocation_points(self, X):
        return self.points

    def error(self, X, inputs, outputs, beg, end, aux_var=None):
        return outputs[beg:end, self.component:self.component + 1] - self.values


# ------------------------------------------------------------------ data
def jacobian(y, x, j):
    return torch.autograd.grad(y, x, torch.ones_like(y), create_graph=True)[0][:, j:j + 1]


class TimePDE:
    def __init__(self, geomtime, pde, bcs, num_domain, num_boundary, num_initial, anchors=None):
        self.geom, self.pde, self.bcs = geomtime, pde, bcs
        domain = geomtime.random_points(num_domain)
        boundary = geomtime.random_boundary_points(num_boundary)
        initial = geomtime.random_initial_points(num_initial)
        X = np.vstack([domain, boundary, initial] + ([anchors] if anchors is not None else []))
        self.train_x_all = X.astype(np.float32)
        self.num_bcs = []
        bc_points = []
        for bc in bcs:
            pts = bc.collocation_points(self.train_x_all)
            self.num_bcs.append(len(pts))
            bc_points.append(pts)
        self.train_x = np.vstack(bc_points + [self.train_x_all]).astype(np.float32)

    def losses_train(self, targets, outputs, inputs, model):
        f = self.pde(inputs, outputs)
        bcs_start = np.cumsum([0] + self.num_bcs)
        losses = [torch.mean(f[bcs_start[-1]:] ** 2)]
        for i, bc in enumerate(self.bcs):
            beg, end = bcs_start[i], bcs_start[i + 1]
            err = bc.error(self.train_x, inputs, outputs, beg, end)
            losses.append(torch.mean(err ** 2))
        return losses


# ------------------------------------------------------------------ model
class FNN(nn.Module):
    def __init__(self, layer_sizes):
        super().__init__()
        self.linears = nn.ModuleList(
            nn.Linear(a, b) for a, b in zip(layer_sizes[:-1], layer_sizes[1:]))
        for lin in self.linears:
            nn.init.xavier_uniform_(lin.weight)
            nn.init.zeros_(lin.bias)

    def forward(self, x):
        for lin in self.linears[:-1]:
            x = torch.tanh(lin(x))
        return self.linears[-1](x)


def Variable(initial_value):
    return torch.tensor(initial_value, dtype=REAL, requires_grad=True)


class VariableValue:
    def __init__(self, var_list, period=1):
        self.var_list = var_list if isinstance(var_list, list) else [var_list]
        self.period = period
        self.value = None

    def on_epoch_end(self, model):
        if model.train_state.epoch % self.period == 0:
            self.value = [v.item() for v in self.var_list]
            print(model.train_state.epoch, [f"{v:.4f}" for v in self.value])


class TrainState:
    def __init__(self):
        self.epoch = 0
        self.loss_train = None


class Model:
    def __init__(self, data, net):
        self.data, self.net = data, net
        self.train_state = TrainState()
        self.external_trainable_variables = []

    def compile(self, optimizer, lr, external_trainable_variables=None):
        if external_trainable_variables is not None:
            if not isinstance(external_trainable_variables, list):
                external_trainable_variables = [external_trainable_variables]
            self.external_trainable_variables = external_trainable_variables
        params = [{"params": self.net.parameters()},
                  {"params": self.external_trainable_variables, "weight_decay": 0}]
        assert optimizer == "adam"
        self.opt = torch.optim.Adam(params, lr=lr)

        def outputs_losses_train(inputs):
            inputs = torch.as_tensor(inputs)
            inputs.requires_grad_()
            outputs_ = self.net(inputs)
            losses = self.data.losses_train(None, outputs_, inputs, self)
            return outputs_, torch.stack(losses)

        def train_step(inputs):
            def closure():
                losses = outputs_losses_train(inputs)[1]
                total_loss = torch.sum(losses)
                self.opt.zero_grad()
                total_loss.backward()  # raises
                return total_loss

            return self.opt.step(closure)

        self.train_step = train_step

    def train(self, iterations, callbacks=(), display_every=10):
        for _ in range(iterations):
            loss = self.train_step(self.data.train_x)
            self.train_state.epoch += 1
            self.train_state.loss_train = loss.item()
            if self.train_state.epoch % display_every == 0:
                print(f"step {self.train_state.epoch}: loss {self.train_state.loss_train:.4e}")
            for cb in callbacks:
                cb.on_epoch_end(self)
        return self.train_state


# ------------------------------------------------------------------ problem
C = Variable(2.0)


def pde(x, y):
    dy_t = jacobian(y, x, j=1)
    dy_x = jacobian(y, x, j=0)
    dy_xx = jacobian(dy_x, x, j=0)
    return (dy_t - dy_xx + torch.exp(-x[:, 1:])
            * (torch.sin(np.pi * x[:, 0:1]) - np.pi ** 2 * torch.sin(np.pi * x[:, 0:1])))


def solution(x):
    return np.sin(np.pi * x[:, 0:1]) * np.exp(-x[:, 1:])


def zero_bc(x):
    return torch.zeros(len(x), 1, dtype=REAL)


def ic_func(x):
    x = torch.as_tensor(x, dtype=REAL)
    return torch.sin(C * x[:, 0:1]) * torch.exp(-x[:, 1:2])


if __name__ == "__main__":
    geom = Interval(-1, 1)
    timedomain = TimeDomain(0, 1)
    geomtime = GeometryXTime(geom, timedomain)

    bc = DirichletBC(geomtime, zero_bc, lambda _, on_boundary: on_boundary)
    ic = IC(geomtime, ic_func, lambda _, on_initial: on_initial)
    observe_x = np.vstack((np.linspace(-1, 1, num=10), np.full((10), 1))).T.astype(np.float32)
    observe_y = PointSetBC(observe_x, solution(observe_x), component=0)

    data = TimePDE(geomtime, pde, [bc, ic, observe_y],
                   num_domain=40, num_boundary=20, num_initial=10, anchors=observe_x)
    net = FNN([2] + [16] * 2 + [1])
    model = Model(data, net)
    model.compile("adam", lr=1e-3, external_trainable_variables=C)
    variable = VariableValue(C, period=10)
    state = model.train(iterations=30, callbacks=[variable])
    print("identified C =", variable.value, "final loss", state.loss_train)
