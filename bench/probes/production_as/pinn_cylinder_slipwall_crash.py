# expect: numpy_requires_grad
# source: https://github.com/lululxvi/deepxde/issues/1046
"""PINN for steady inviscid (Euler) flow around a cylinder in a channel, written
against a small DeepXDE-style toolkit (geometry / icbc / data / model modules
collapsed into one file, PyTorch backend).

Inlet velocity and outlet pressure are Dirichlet conditions; on the cylinder a
slip-wall (no-penetration) condition n . (u, v) = 0 is imposed through an
OperatorBC that uses the geometry's boundary normal.
"""
import functools
import time

import numpy as np
import torch
import torch.nn as nn

CONFIG = {
    "geometry": {"xmin": [-3.0, -2.0], "xmax": [3.0, 2.0], "center": [0.0, 0.0], "radius": 1.0},
    "data": {"num_domain": 256, "num_boundary": 96, "seed": 0},
    "net": {"layers": [2, 32, 32, 32, 3], "activation": "tanh"},
    "train": {"lr": 1e-3, "decay_step": 20, "decay_rate": 0.5, "iterations": 40, "display_every": 10},
}


# ----------------------------------------------------------------------------- geometry
class Rectangle:
    def __init__(self, xmin, xmax):
        self.xmin, self.xmax = np.array(xmin), np.array(xmax)

    def inside(self, x):
        return np.all((self.xmin <= x) & (x <= self.xmax), axis=-1)

    def on_boundary(self, x):
        _on = np.logical_or(np.isclose(x, self.xmin), np.isclose(x, self.xmax)).any(axis=-1)
        return np.logical_and(self.inside(x), _on)

    def random_points(self, n, rng):
        return rng.uniform(self.xmin, self.xmax, size=(n, 2))

    def random_boundary_points(self, n, rng):
        side = rng.integers(0, 4, size=n)
        t = rng.uniform(0, 1, size=n)
        x = self.xmin[0] + t * (self.xmax[0] - self.xmin[0])
        y = self.xmin[1] + t * (self.xmax[1] - self.xmin[1])
        pts = np.stack([np.where(side == 0, self.xmin[0], np.where(side == 1, self.xmax[0], x)),
                        np.where(side == 2, self.xmin[1], np.where(side == 3, self.xmax[1], y))], -1)
        return pts


class Disk:
    def __init__(self, center, radius):
        self.center, self.radius = np.array(center), radius

    def inside(self, x):
        return np.linalg.norm(x - self.center, axis=-1) <= self.radius

    def on_boundary(self, x):
        return np.isclose(np.linalg.norm(x - self.center, axis=-1), self.radius)

    def boundary_normal(self, x):
        _n = x - self.center  # raises
        l = np.linalg.norm(_n, axis=-1, keepdims=True)
        _n = _n / l * np.isclose(l, self.radius)
        return _n

    def random_boundary_points(self, n, rng):
        theta = rng.uniform(0, 2 * np.pi, size=n)
        return self.center + self.radius * np.stack([np.cos(theta), np.sin(theta)], -1)


class CSGDifference:
    def __init__(self, geom1, geom2):
        self.geom1, self.geom2 = geom1, geom2

    def inside(self, x):
        return np.logical_and(self.geom1.inside(x), ~self.geom2.inside(x))

    def on_boundary(self, x):
        return np.logical_or(np.logical_and(self.geom1.on_boundary(x), ~self.geom2.inside(x)),
                             np.logical_and(self.geom1.inside(x), self.geom2.on_boundary(x)))

    def random_points(self, n, rng):
        pts = np.empty((0, 2))
        while len(pts) < n:
            cand = self.geom1.random_points(n, rng)
            pts = np.vstack([pts, cand[~self.geom2.inside(cand)]])
        return pts[:n]

    def random_boundary_points(self, n, rng):
        return np.vstack([self.geom1.random_boundary_points(n // 2, rng),
                          self.geom2.random_boundary_points(n - n // 2, rng)])


# ----------------------------------------------------------------------------- grad
class Jacobians:
    """Caches d(ys[:, i])/d(xs) per (ys, xs) pair; cleared after every step."""
    def __init__(self):
        self.Js = {}

    def __call__(self, ys, xs, i=0, j=None):
        key = (id(ys), id(xs), i)
        if key not in self.Js:
            self.Js[key] = torch.autograd.grad(ys[:, i:i + 1], xs, grad_outputs=torch.ones_like(ys[:, i:i + 1]),
                                               create_graph=True)[0]
        J = self.Js[key]
        return J if j is None else J[:, j:j + 1]

    def clear(self):
        self.Js = {}


jacobian = Jacobians()


# ----------------------------------------------------------------------------- icbc
def npfunc_range_autocache(func):
    """Cache numpy BC values by the identity of the training-point array."""
    cache = {}

    @functools.wraps(func)
    def wrapper(X, beg, end):
        key = (id(X), beg, end)
        if key not in cache:
            cache[key] = torch.as_tensor(func(X[beg:end]), dtype=torch.float32)
        return cache[key]
    return wrapper


class BC:
    def __init__(self, geom, on_boundary, component):
        self.geom = geom
        self.on_boundary = lambda x, on: np.array([on_boundary(x[i], on[i]) for i in range(len(x))])
        self.component = component

    def collocation_points(self, X):
        return X[self.on_boundary(X, self.geom.on_boundary(X))]


class DirichletBC(BC):
    def __init__(self, geom, func, on_boundary, component=0):
        super().__init__(geom, on_boundary, component)
        self.func = npfunc_range_autocache(func)

    def error(self, X, inputs, outputs, beg, end):
        return outputs[beg:end, self.component:self.component + 1] - self.func(X, beg, end)


class OperatorBC(BC):
    def __init__(self, geom, func, on_boundary):
        super().__init__(geom, on_boundary, 0)
        self.func = func

    def error(self, X, inputs, outputs, beg, end):
        return self.func(inputs, outputs, X)[beg:end]


# ----------------------------------------------------------------------------- data
class PDE:
    def __init__(self, geometry, pde, bcs, num_domain, num_boundary, seed=0):
        self.geom, self.pde, self.bcs = geometry, pde, bcs
        rng = np.random.default_rng(seed)
        domain = geometry.random_points(num_domain, rng)
        boundary = geometry.random_boundary_points(num_boundary, rng)
        bc_points = [bc.collocation_points(boundary) for bc in bcs]
        self.num_bcs = [len(p) for p in bc_points]
        self.train_x = np.vstack(bc_points + [domain]).astype(np.float32)

    def losses(self, outputs, inputs, loss_fn):
        f = self.pde(inputs, outputs)
        bcs_start = np.cumsum([0] + self.num_bcs)
        error_f = [fi[bcs_start[-1]:] for fi in f]
        losses = [loss_fn(torch.zeros_like(e), e) for e in error_f]
        for i, bc in enumerate(self.bcs):
            beg, end = bcs_start[i], bcs_start[i + 1]
            error = bc.error(self.train_x, inputs, outputs, beg, end)
            losses.append(loss_fn(torch.zeros_like(error), error))
        return losses


# ----------------------------------------------------------------------------- model
class FNN(nn.Module):
    def __init__(self, layers, activation):
        super().__init__()
        self.linears = nn.ModuleList(nn.Linear(a, b) for a, b in zip(layers[:-1], layers[1:]))
        self.activation = {"tanh": torch.tanh, "sin": torch.sin}[activation]
        for lin in self.linears:
            nn.init.xavier_normal_(lin.weight)
            nn.init.zeros_(lin.bias)

    def forward(self, x):
        for lin in self.linears[:-1]:
            x = self.activation(lin(x))
        return self.linears[-1](x)


class LossHistory:
    def __init__(self, display_every):
        self.display_every, self.steps, self.loss_train = display_every, [], []

    def on_step_end(self, step, losses):
        self.steps.append(step)
        self.loss_train.append(losses)
        if step % self.display_every == 0:
            print("{:6d}  [{}]".format(step, ", ".join("{:.2e}".format(v) for v in losses)))


class Model:
    def __init__(self, data, net):
        self.data, self.net = data, net
        self.opt = self.scheduler = None

    def compile(self, lr, decay_step, decay_rate):
        self.opt = torch.optim.Adam(self.net.parameters(), lr=lr)
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.opt, step_size=decay_step, gamma=decay_rate)
        self.loss_fn = nn.MSELoss()

    def outputs_losses(self):
        inputs = torch.as_tensor(self.data.train_x).requires_grad_()
        outputs = self.net(inputs)
        losses = self.data.losses(outputs, inputs, self.loss_fn)
        jacobian.clear()
        return outputs, losses

    def train_step(self):
        self.opt.zero_grad()
        _, losses = self.outputs_losses()
        total_loss = torch.sum(torch.stack(losses))
        total_loss.backward()
        self.opt.step()
        self.scheduler.step()
        return [l.item() for l in losses]

    def train(self, iterations, callbacks=()):
        t0 = time.time()
        for step in range(1, iterations + 1):
            losses = self.train_step()
            for cb in callbacks:
                cb.on_step_end(step, losses)
        print("'train' took {:.2f} s".format(time.time() - t0))


# ----------------------------------------------------------------------------- problem
def euler_steady(x, y):
    u, v, p = y[:, 0:1], y[:, 1:2], y[:, 2:3]
    du_x, du_y = jacobian(y, x, i=0, j=0), jacobian(y, x, i=0, j=1)
    dv_x, dv_y = jacobian(y, x, i=1, j=0), jacobian(y, x, i=1, j=1)
    dp_x, dp_y = jacobian(y, x, i=2, j=0), jacobian(y, x, i=2, j=1)
    continuity = du_x + dv_y
    x_momentum = u * du_x + v * du_y + dp_x
    y_momentum = u * dv_x + v * dv_y + dp_y
    return [continuity, x_momentum, y_momentum]


def main():
    torch.manual_seed(0)
    g = CONFIG["geometry"]
    rectangle = Rectangle(g["xmin"], g["xmax"])
    cylinder = Disk(g["center"], g["radius"])
    geom = CSGDifference(rectangle, cylinder)

    def inlet(x, on_boundary):
        return on_boundary and np.isclose(x[0], g["xmin"][0])

    def outlet(x, on_boundary):
        return on_boundary and np.isclose(x[0], g["xmax"][0])

    def inner(x, on_boundary):
        return on_boundary and cylinder.on_boundary(x)

    def normal_vel(inputs, outputs, X):
        velocity = outputs[:, 0:2]
        normal = cylinder.boundary_normal(inputs)
        return torch.sum(velocity * normal, 1, keepdim=True)

    bcs = [
        DirichletBC(geom, lambda x: np.ones((len(x), 1)), inlet, component=0),
        DirichletBC(geom, lambda x: np.zeros((len(x), 1)), inlet, component=1),
        DirichletBC(geom, lambda x: np.zeros((len(x), 1)), outlet, component=2),
        OperatorBC(geom, normal_vel, inner),
    ]
    data = PDE(geom, euler_steady, bcs, **CONFIG["data"])
    net = FNN(**CONFIG["net"])
    model = Model(data, net)
    t = CONFIG["train"]
    model.compile(t["lr"], t["decay_step"], t["decay_rate"])
    model.train(t["iterations"], callbacks=[LossHistory(t["display_every"])])


if __name__ == "__main__":
    main()
