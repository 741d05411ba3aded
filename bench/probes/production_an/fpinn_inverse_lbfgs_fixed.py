# expect: clean
# source: https://github.com/lululxvi/deepxde/issues/1400
"""fPINN inverse problem for the 1-D fractional Poisson equation, DeepXDE style.

The unknown fractional order alpha is a trainable variable.  The fractional
Laplacian is discretised with the Grunwald-Letnikov (GL) formula on a dynamic
set of auxiliary points (class `Fractional`), the data object `FPDE` builds the
training points and the integral matrix, and `Model` trains the network and
alpha with L-BFGS through a closure.
"""
import functools
import math

import numpy as np
import torch
import torch.nn as nn

torch.set_default_dtype(torch.float64)

CONFIG = {
    "alpha0": 1.8,
    "alpha_init": 1.5,
    "resolution": [16],
    "meshtype": "dynamic",
    "num_domain": 12,
    "layers": [1, 20, 20, 1],
    "optimizer": "L-BFGS",
    "lbfgs": {"max_iter": 6, "history_size": 10},
    "iterations": 2,
    "seed": 0,
}


def run_if_all_none(*attr):
    def decorator(func):
        @functools.wraps(func)
        def wrapper(self, *args, **kwargs):
            x = [getattr(self, a) for a in attr]
            if all(i is None for i in x):
                return func(self, *args, **kwargs)
            return x if len(x) > 1 else x[0]
        return wrapper
    return decorator


class Interval:
    def __init__(self, l, r):
        self.l, self.r = l, r
        self.diam = r - l

    def on_boundary(self, x):
        return np.isclose(x[:, 0], self.l) | np.isclose(x[:, 0], self.r)

    def random_points(self, n, rng):
        return np.sort(rng.uniform(self.l, self.r, size=(n, 1)), axis=0)

    def boundary_points(self):
        return np.array([[self.l], [self.r]])

    def background_points(self, x, dirn, dist2npt, shift):
        dx = self.diam / dist2npt
        n = int(math.ceil((x - self.l if dirn < 0 else self.r - x) / dx)) + shift
        return [x + dirn * dx * i for i in range(n)]


class Scheme:
    def __init__(self, meshtype, resolution):
        self.meshtype = meshtype
        self.resolution = resolution


class Fractional:
    """Grunwald-Letnikov discretisation of the fractional Laplacian."""

    def __init__(self, alpha, geom, disc, x0):
        self.alpha, self.geom, self.disc, self.x0 = alpha, geom, disc, x0
        self.x, self.w = None, None
        self._w_init = self._init_weights()

    def _init_weights(self):
        n = self.dynamic_dist2npts(self.geom.diam) + 1
        w = [torch.ones((), dtype=torch.float64)]
        for j in range(1, n):
            w.append(w[-1] * (j - 1 - self.alpha) / j)
        return w

    def dynamic_dist2npts(self, dx):
        return int(math.ceil(self.disc.resolution[-1] * dx))

    def get_x(self):
        xs, self.counts = [], []
        for x0i in self.x0[:, 0]:
            left = self.geom.background_points(x0i, -1, self.disc.resolution[-1], 1)
            right = self.geom.background_points(x0i, 1, self.disc.resolution[-1], 1)
            xs.extend(left[1:] + right[1:])
            self.counts.append((len(left) - 1, len(right) - 1))
        self.x = np.vstack([self.x0, np.array(xs)[:, None]])
        return self.x

    def get_matrix(self):
        h = 1.0 / self.disc.resolution[-1]
        scale = h ** (-self.alpha) / (2 * torch.cos(self.alpha * math.pi / 2))
        n0, total = len(self.x0), len(self.x)
        rows, offset = [], n0
        w = self._init_weights()
        for i, (nl, nr) in enumerate(self.counts):
            pieces = [torch.zeros(i), (2 * w[0]).reshape(1), torch.zeros(n0 - i - 1), torch.zeros(offset - n0)]
            pieces.append(torch.stack(w[:nl]) if nl > 0 else torch.zeros(0))
            pieces.append(torch.stack(w[:nr]) if nr > 0 else torch.zeros(0))
            row = torch.cat(pieces)
            row = torch.cat([row, torch.zeros(total - row.numel())])
            rows.append(row)
            offset += nl + nr
        return -scale * torch.stack(rows)


class FPDE:
    def __init__(self, geom, pde, alpha, resolution, meshtype, num_domain, solution, seed):
        self.geom, self.pde, self.alpha = geom, pde, alpha
        self.disc = Scheme(meshtype, resolution)
        self.num_domain, self.soln = num_domain, solution
        self.rng = np.random.RandomState(seed)
        self.frac_train = None
        self.train_x, self.train_y = None, None

    @run_if_all_none("train_x", "train_y")
    def train_next_batch(self):
        x_f = self.geom.random_points(self.num_domain, self.rng)
        x_f = x_f[~self.geom.on_boundary(x_f)]
        self.frac_train = Fractional(self.alpha, self.geom, self.disc, x_f)
        X = self.frac_train.get_x()
        self.num_bcs = 2
        self.train_x = np.vstack((self.geom.boundary_points(), X))
        self.train_y = self.soln(self.train_x)
        return self.train_x, self.train_y

    def get_int_matrix(self):
        int_mat = self.frac_train.get_matrix()
        nb = self.num_bcs
        return torch.cat([torch.zeros(int_mat.shape[0], nb), int_mat], dim=1)

    def losses(self, inputs, outputs):
        int_mat = self.get_int_matrix()
        f = self.pde(inputs, outputs, int_mat)
        loss_pde = (f ** 2).mean()
        loss_bc = (outputs[: self.num_bcs] ** 2).mean()
        n_obs = len(self.frac_train.x0)
        obs = torch.as_tensor(self.train_y[self.num_bcs: self.num_bcs + n_obs])
        loss_obs = ((outputs[self.num_bcs: self.num_bcs + n_obs] - obs) ** 2).mean()
        return [loss_pde, loss_bc, loss_obs]


class FNN(nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.linears = nn.ModuleList(nn.Linear(a, b) for a, b in zip(layers[:-1], layers[1:]))
        for lin in self.linears:
            nn.init.xavier_normal_(lin.weight)
            nn.init.zeros_(lin.bias)

    def forward(self, x):
        for lin in self.linears[:-1]:
            x = torch.tanh(lin(x))
        return self.linears[-1](x)


class Model:
    def __init__(self, data, net, external_trainable_variables):
        self.data, self.net = data, net
        self.external = external_trainable_variables
        self.losshistory = []

    def compile(self, optimizer, lbfgs):
        params = list(self.net.parameters()) + list(self.external)
        if optimizer == "L-BFGS":
            self.opt = torch.optim.LBFGS(params, lr=1, max_iter=lbfgs["max_iter"],
                                         history_size=lbfgs["history_size"],
                                         line_search_fn="strong_wolfe")
        else:
            self.opt = torch.optim.Adam(params, lr=1e-3)

    def train(self, iterations):
        for it in range(iterations):
            train_x, _ = self.data.train_next_batch()
            inputs = torch.as_tensor(train_x)

            def closure():
                self.opt.zero_grad()
                outputs = self.net(inputs)
                losses = self.data.losses(inputs, outputs)
                total_loss = sum(losses)
                total_loss.backward()
                return total_loss

            loss = self.opt.step(closure)
            self.losshistory.append(float(loss))
            print(f"iter {it}: loss {float(loss):.4e} alpha {self.external[0].item():.4f}")


def main():
    cfg = CONFIG
    np.random.seed(cfg["seed"])
    torch.manual_seed(cfg["seed"])
    alpha = torch.tensor(cfg["alpha_init"], requires_grad=True)
    alpha0 = cfg["alpha0"]

    def fpde(x, y, int_mat):
        lhs = -torch.mm(int_mat, y)
        n = int_mat.shape[0]
        xf = x[2: 2 + n, 0:1]
        rhs = (math.gamma(alpha0 + 2) * xf
               - 3 * math.gamma(alpha0 + 3) / math.gamma(2 * alpha0 + 3) * xf ** 2)
        return lhs - rhs

    def solution(x):
        return x * (np.abs(1 - x ** 2) / 2) ** (alpha0 / 2)

    geom = Interval(0, 1)
    data = FPDE(geom, fpde, alpha, cfg["resolution"], cfg["meshtype"], cfg["num_domain"],
                solution, cfg["seed"])
    net = FNN(cfg["layers"])
    model = Model(data, net, external_trainable_variables=[alpha])
    model.compile(cfg["optimizer"], cfg["lbfgs"])
    model.train(cfg["iterations"])
    print("final alpha", alpha.item())


if __name__ == "__main__":
    main()
