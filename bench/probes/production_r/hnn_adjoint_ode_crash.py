# expect: no_grad_fn
# source: https://github.com/rtqichen/torchdiffeq/issues/154
"""Hamiltonian neural ODE for a pendulum trained with the adjoint method.

The vector field is the symplectic gradient of a learned energy network, so
the ODE function differentiates the energy with respect to the state inside
its forward.  A small torchdiffeq-like solver module provides fixed-step RK4
`odeint` and an `odeint_adjoint` implemented as an autograd Function that
integrates the augmented adjoint system backwards in time.  Training windows
are cut from simulated pendulum trajectories; a Trainer runs train_step /
evaluate with Adam and a step LR schedule.
"""
import argparse
import math
import time

import torch
import torch.nn as nn

parser = argparse.ArgumentParser("hamiltonian ode demo")
parser.add_argument("--data_size", type=int, default=200)
parser.add_argument("--batch_time", type=int, default=8)
parser.add_argument("--batch_size", type=int, default=16)
parser.add_argument("--niters", type=int, default=6)
parser.add_argument("--test_freq", type=int, default=3)
parser.add_argument("--step_size", type=float, default=0.05)
parser.add_argument("--adjoint", action="store_true", default=True)
parser.add_argument("--lr", type=float, default=1e-3)


# ---------------------------------------------------------------- solver ---
def _rk4_step(func, t0, dt, y0):
    k1 = func(t0, y0)
    k2 = func(t0 + dt / 2, tuple(y + dt / 2 * k for y, k in zip(y0, k1)))
    k3 = func(t0 + dt / 2, tuple(y + dt / 2 * k for y, k in zip(y0, k2)))
    k4 = func(t0 + dt, tuple(y + dt * k for y, k in zip(y0, k3)))
    return tuple(y + dt / 6 * (a + 2 * b + 2 * c + d) for y, a, b, c, d in zip(y0, k1, k2, k3, k4))


def _integrate(func, y0, t0, t1, step_size):
    n = max(1, int(math.ceil(abs(float(t1 - t0)) / step_size)))
    dt = (t1 - t0) / n
    y = y0
    for i in range(n):
        y = _rk4_step(func, t0 + i * dt, dt, y)
    return y


def odeint(func, y0, t, step_size=0.05):
    """Fixed grid RK4; returns the solution at every time in t, stacked on dim 0."""
    tuple_func = lambda tt, yy: (func(tt, yy[0]),)
    solution = [y0]
    y = (y0,)
    for i in range(len(t) - 1):
        y = _integrate(tuple_func, y, t[i], t[i + 1], step_size)
        solution.append(y[0])
    return torch.stack(solution)


class OdeintAdjointMethod(torch.autograd.Function):

    @staticmethod
    def forward(ctx, func, y0, t, step_size, *adjoint_params):
        ctx.func = func
        ctx.step_size = step_size
        with torch.no_grad():
            y = odeint(func, y0, t, step_size=step_size)
        ctx.save_for_backward(t, y, *adjoint_params)
        return y

    @staticmethod
    def backward(ctx, grad_y):
        with torch.no_grad():
            func = ctx.func
            t, y, *adjoint_params = ctx.saved_tensors
            adjoint_params = tuple(adjoint_params)

            def augmented_dynamics(t_, y_aug):
                y_, adj_y = y_aug[0], y_aug[1]
                with torch.enable_grad():
                    y_ = y_.detach().requires_grad_(True)
                    func_eval = func(t_, y_)
                    vjp_y, *vjp_params = torch.autograd.grad(
                        func_eval, (y_,) + adjoint_params, -adj_y, allow_unused=True, retain_graph=True)
                vjp_y = torch.zeros_like(y_) if vjp_y is None else vjp_y
                vjp_params = [torch.zeros_like(p) if v is None else v for v, p in zip(vjp_params, adjoint_params)]
                return (func_eval, vjp_y, *vjp_params)

            adj_y = grad_y[-1]
            adj_params = [torch.zeros_like(p) for p in adjoint_params]
            for i in range(len(t) - 1, 0, -1):
                aug_state = (y[i], adj_y, *adj_params)
                aug_state = _integrate(augmented_dynamics, aug_state, t[i], t[i - 1], ctx.step_size)
                adj_y = aug_state[1] + grad_y[i - 1]
                adj_params = list(aug_state[2:])
        return (None, adj_y, None, None, *adj_params)


def odeint_adjoint(func, y0, t, step_size=0.05, adjoint_params=None):
    if not isinstance(func, nn.Module):
        raise ValueError("func must be an instance of nn.Module to specify the adjoint parameters.")
    if adjoint_params is None:
        adjoint_params = tuple(p for p in func.parameters() if p.requires_grad)
    return OdeintAdjointMethod.apply(func, y0, t, step_size, *adjoint_params)


# ----------------------------------------------------------------- model ---
class ODEFunc(nn.Module):
    """Symplectic gradient of a learned Hamiltonian H(q, p)."""

    def __init__(self, hidden=64):
        super(ODEFunc, self).__init__()
        self.net = nn.Sequential(nn.Linear(2, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                                 nn.Linear(hidden, 1))
        self.register_buffer("J", torch.tensor([[0.0, 1.0], [-1.0, 0.0]]))
        self.nfe = 0

    def my_func(self, x):
        return self.net(x)

    def forward(self, t, x):
        self.nfe += 1
        y = self.my_func(x)
        dy = torch.autograd.grad(y, x, grad_outputs=torch.ones_like(y), create_graph=True)[0]  # raises
        return dy @ self.J


class RunningAverageMeter(object):
    """Computes and stores the average and current value"""

    def __init__(self, momentum=0.99):
        self.momentum = momentum
        self.val, self.avg = None, 0

    def update(self, val):
        self.avg = val if self.val is None else self.avg * self.momentum + val * (1 - self.momentum)
        self.val = val


def pendulum_field(t, x):
    q, p = x[..., :1], x[..., 1:]
    return torch.cat([p, -torch.sin(q)], -1)


def make_dataset(args):
    t = torch.linspace(0.0, 10.0, args.data_size)
    true_y0 = torch.tensor([[1.2, 0.0], [-0.5, 0.8], [2.0, -0.3]])
    with torch.no_grad():
        true_y = odeint(pendulum_field, true_y0, t, step_size=0.01)
    return t, true_y


class Trainer:
    def __init__(self, args, func):
        self.args = args
        self.func = func
        self.solve = odeint_adjoint if args.adjoint else odeint
        self.optimizer = torch.optim.Adam(func.parameters(), lr=args.lr)
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=4, gamma=0.5)
        self.loss_meter = RunningAverageMeter(0.97)
        self.time_meter = RunningAverageMeter(0.97)
        self.t, self.true_y = make_dataset(args)
        self.g = torch.Generator().manual_seed(0)

    def get_batch(self):
        a = self.args
        s = torch.randint(0, a.data_size - a.batch_time, (a.batch_size,), generator=self.g)
        traj = torch.randint(0, self.true_y.shape[1], (a.batch_size,), generator=self.g)
        batch_y0 = self.true_y[s, traj]
        batch_t = self.t[:a.batch_time]
        batch_y = torch.stack([self.true_y[s + i, traj] for i in range(a.batch_time)], dim=0)
        # the vector field differentiates the energy w.r.t. the state
        return batch_y0.requires_grad_(True), batch_t, batch_y

    def train_step(self):
        end = time.time()
        self.optimizer.zero_grad()
        batch_y0, batch_t, batch_y = self.get_batch()
        pred_y = self.solve(self.func, batch_y0, batch_t, step_size=self.args.step_size)
        loss = torch.mean(torch.abs(pred_y - batch_y))
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        self.time_meter.update(time.time() - end)
        self.loss_meter.update(loss.item())
        return loss.item()

    def evaluate(self):
        y0 = self.true_y[0].clone().requires_grad_(True)
        t = self.t[:40]
        pred_y = odeint(self.func, y0, t, step_size=self.args.step_size).detach()
        energy = 0.5 * pred_y[..., 1] ** 2 + (1 - torch.cos(pred_y[..., 0]))
        return torch.mean(torch.abs(pred_y - self.true_y[:40])).item(), (energy[-1] - energy[0]).abs().mean().item()

    def fit(self):
        for itr in range(1, self.args.niters + 1):
            self.train_step()
            if itr % self.args.test_freq == 0:
                err, drift = self.evaluate()
                print("Iter {:04d} | Total Loss {:.6f} | Energy drift {:.4f} | NFE {}".format(
                    itr, err, drift, self.func.nfe))


def main():
    args = parser.parse_args([])
    torch.manual_seed(0)
    func = ODEFunc()
    Trainer(args, func).fit()


if __name__ == "__main__":
    main()
