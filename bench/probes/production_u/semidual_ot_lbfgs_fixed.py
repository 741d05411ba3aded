# expect: clean
# source: https://github.com/pytorch/pytorch/issues/15923
"""Entropic semi-dual optimal transport solved with a vendored L-BFGS.

Computes the regularised OT between a source and a target point cloud by
maximising the smoothed semi-dual over the target potential g (Cuturi &
Peyre). The project ships its own L-BFGS (two-loop recursion, fixed step,
history of curvature pairs) ported from the C++ frontend so that the same
optimiser runs in the C++ and Python builds. After solving, the barycentric
projection maps source points and a simple report is printed.
"""
from types import SimpleNamespace

import torch
from torch.optim import Optimizer


class LBFGS(Optimizer):
    """Port of the frontend L-BFGS (no line search)."""

    def __init__(self, params, lr=1.0, max_iter=20, tolerance_grad=1e-7, tolerance_change=1e-9,
                 history_size=10):
        defaults = dict(lr=lr, max_iter=max_iter, tolerance_grad=tolerance_grad,
                        tolerance_change=tolerance_change, history_size=history_size)
        super().__init__(params, defaults)
        if len(self.param_groups) != 1:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        self._params = self.param_groups[0]["params"]
        self._numel_cache = None

    def _numel(self):
        if self._numel_cache is None:
            self._numel_cache = sum(p.numel() for p in self._params)
        return self._numel_cache

    def _gather_flat_grad(self):
        views = []
        for p in self._params:
            if p.grad is None:
                views.append(p.new_zeros(p.numel()))
            else:
                views.append(p.grad.reshape(-1))
        return torch.cat(views, 0)

    @torch.no_grad()
    def _add_grad(self, step_size, update):
        offset = 0
        for p in self._params:
            numel = p.numel()
            p.add_(update[offset:offset + numel].view_as(p), alpha=step_size)
            offset += numel
        assert offset == self._numel()

    def step(self, closure):
        group = self.param_groups[0]
        lr, max_iter = group["lr"], group["max_iter"]
        tolerance_grad, tolerance_change = group["tolerance_grad"], group["tolerance_change"]
        history_size = group["history_size"]

        state = self.state[self._params[0]]
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)

        orig_loss = closure()
        loss = float(orig_loss)
        state["func_evals"] += 1
        flat_grad = self._gather_flat_grad()
        if flat_grad.abs().max() <= tolerance_grad:
            return orig_loss

        d = state.get("d")
        t = state.get("t")
        old_dirs = state.get("old_dirs", [])
        old_stps = state.get("old_stps", [])
        H_diag = state.get("H_diag", 1)
        prev_flat_grad = state.get("prev_flat_grad")
        prev_loss = state.get("prev_loss")

        n_iter = 0
        while n_iter < max_iter:
            n_iter += 1
            state["n_iter"] += 1
            if state["n_iter"] == 1:
                d = flat_grad.neg()
                old_dirs, old_stps = [], []
                H_diag = 1
            else:
                y = flat_grad.sub(prev_flat_grad)
                s = d.mul(t)
                ys = y.dot(s)
                if ys > 1e-10:
                    if len(old_dirs) == history_size:
                        old_dirs.pop(0)
                        old_stps.pop(0)
                    old_dirs.append(y)
                    old_stps.append(s)
                    H_diag = ys / y.dot(y)
                num_old = len(old_dirs)
                ro = [1.0 / old_dirs[i].dot(old_stps[i]) for i in range(num_old)]
                al = [None] * num_old
                q = flat_grad.neg()
                for i in range(num_old - 1, -1, -1):
                    al[i] = old_stps[i].dot(q) * ro[i]
                    q.add_(old_dirs[i], alpha=-al[i])
                d = r = torch.mul(q, H_diag)
                for i in range(num_old):
                    be_i = old_dirs[i].dot(r) * ro[i]
                    r.add_(old_stps[i], alpha=al[i] - be_i)

            prev_flat_grad = flat_grad.clone()
            prev_loss = loss
            t = min(1.0, 1.0 / flat_grad.abs().sum()) * lr if state["n_iter"] == 1 else lr
            gtd = flat_grad.dot(d)
            if gtd > -tolerance_change:
                break

            self._add_grad(t, d)
            if n_iter != max_iter:
                loss = float(closure())
                flat_grad = self._gather_flat_grad()
                state["func_evals"] += 1
            if flat_grad.abs().max() <= tolerance_grad:
                break
            if d.mul(t).abs().max() <= tolerance_change or abs(loss - prev_loss) < tolerance_change:
                break

        state.update(d=d, t=t, old_dirs=old_dirs, old_stps=old_stps, H_diag=H_diag,
                     prev_flat_grad=prev_flat_grad, prev_loss=prev_loss)
        return orig_loss


def squared_euclidean_cost(x, y):
    return (x[:, None, :] - y[None, :, :]).pow(2).sum(-1)


class SemiDualEntropicOT:
    def __init__(self, source, target, a, b, cfg):
        self.source, self.target = source, target
        self.a, self.b = a, b
        self.cfg = cfg
        self.C = squared_euclidean_cost(source, target) / cfg.cost_scale
        self.g = torch.zeros(target.size(0), requires_grad=True)
        self.history = []

    def c_transform(self, g):
        eps = self.cfg.epsilon
        return -eps * torch.logsumexp((g[None, :] - self.C) / eps + torch.log(self.b)[None, :], dim=1)

    def semi_dual(self, g):
        return (self.a * self.c_transform(g)).sum() + (self.b * g).sum()

    def plan(self):
        with torch.no_grad():
            f = self.c_transform(self.g)
            log_p = (f[:, None] + self.g[None, :] - self.C) / self.cfg.epsilon
            return self.a[:, None] * self.b[None, :] * torch.exp(log_p)

    def barycentric_map(self):
        P = self.plan()
        return (P @ self.target) / P.sum(1, keepdim=True)

    def solve(self):
        optimizer = LBFGS([self.g], lr=self.cfg.lr, max_iter=self.cfg.inner_iters,
                          history_size=self.cfg.history_size)

        def closure():
            optimizer.zero_grad()
            loss = -self.semi_dual(self.g)
            loss.backward()
            return loss

        for it in range(self.cfg.outer_iters):
            loss = optimizer.step(closure)
            self.history.append(-float(loss))
            if it % self.cfg.log_every == 0:
                print("iter %d  semi-dual %.5f" % (it, self.history[-1]))
        return self.history[-1]


def make_clouds(cfg):
    gen = torch.Generator().manual_seed(cfg.seed)
    source = torch.randn(cfg.n_source, 2, generator=gen)
    angle = torch.rand(cfg.n_target, generator=gen) * 6.2831853
    target = torch.stack([torch.cos(angle), torch.sin(angle)], 1) * 2.0 + 0.1 * torch.randn(
        cfg.n_target, 2, generator=gen)
    a = torch.full((cfg.n_source,), 1.0 / cfg.n_source)
    b = torch.full((cfg.n_target,), 1.0 / cfg.n_target)
    return source, target, a, b


def main():
    cfg = SimpleNamespace(n_source=64, n_target=48, epsilon=0.05, cost_scale=4.0, lr=1.0, inner_iters=10,
                          outer_iters=5, history_size=8, log_every=1, seed=0)
    torch.manual_seed(cfg.seed)
    source, target, a, b = make_clouds(cfg)
    solver = SemiDualEntropicOT(source, target, a, b, cfg)
    value = solver.solve()
    mapped = solver.barycentric_map()
    print("final semi-dual %.5f  mean mapped radius %.3f" % (value, mapped.norm(dim=1).mean().item()))


if __name__ == "__main__":
    main()
