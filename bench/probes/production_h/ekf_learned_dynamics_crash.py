# expect: no_grad_fn
# source: https://github.com/Lightning-AI/pytorch-lightning/issues/19910
"""Learned pendulum dynamics + extended Kalman filter, organised as a small
Lightning-style module/trainer pair.  The dynamics network is fitted on
one-step transitions; validation and test run an EKF whose transition
Jacobian is obtained with autograd."""
import copy
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
np.random.seed(0)

CONFIG = {
    "trainer": {"max_epochs": 3, "inference_mode": True, "log_every_n_steps": 10, "patience": 2},
    "model": {"hidden": 32, "lr": 3e-3, "weight_decay": 1e-5},
    "data": {"n_traj": 24, "T": 40, "dt": 0.05, "obs_std": 0.05, "batch_size": 64},
    "ekf": {"q": 1e-4, "r": 0.05 ** 2, "p0": 0.1},
}


def pendulum_rk4(x, dt, g=9.81, l=1.0, damping=0.1):
    def f(s):
        return np.array([s[1], -g / l * np.sin(s[0]) - damping * s[1]])
    k1 = f(x); k2 = f(x + 0.5 * dt * k1); k3 = f(x + 0.5 * dt * k2); k4 = f(x + dt * k3)
    return x + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)


def make_trajectories(cfg, rng):
    trajs = []
    for _ in range(cfg["n_traj"]):
        x = np.array([rng.uniform(-1.5, 1.5), rng.uniform(-1, 1)])
        traj = [x]
        for _ in range(cfg["T"] - 1):
            x = pendulum_rk4(x, cfg["dt"])
            traj.append(x)
        trajs.append(np.stack(traj))
    states = torch.tensor(np.stack(trajs), dtype=torch.float32)
    obs = states[..., :1] + cfg["obs_std"] * torch.randn(states.shape[:-1] + (1,))
    return states, obs


def jacobian(f, x):
    with torch.enable_grad():
        x = x.detach().requires_grad_(True)
        y = f(x)
        I_N = torch.eye(y.shape[-1])
        rows = [torch.autograd.grad(y, x, v, retain_graph=True, allow_unused=True)[0] for v in I_N.unbind()]  # raises
    return torch.stack(rows), y.detach()


class DynamicsNet(nn.Module):
    def __init__(self, hidden, dt):
        super().__init__()
        self.dt = dt
        self.net = nn.Sequential(nn.Linear(2, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                                 nn.Linear(hidden, 2))

    def forward(self, x):
        return x + self.dt * self.net(x)


class LitModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.logged = {}

    def log(self, name, value):
        self.logged.setdefault(name, []).append(float(value))


class LitEKF(LitModule):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.dynamics = DynamicsNet(cfg["model"]["hidden"], cfg["data"]["dt"])
        self.H = torch.tensor([[1.0, 0.0]])

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=self.cfg["model"]["lr"],
                                weight_decay=self.cfg["model"]["weight_decay"])
        return opt, torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)

    def training_step(self, batch, batch_idx):
        x, x_next = batch
        loss = F.mse_loss(self.dynamics(x), x_next)
        self.log("train_loss", loss.item())
        return loss

    def ekf(self, obs):
        q, r, p0 = self.cfg["ekf"]["q"], self.cfg["ekf"]["r"], self.cfg["ekf"]["p0"]
        Q, R = q * torch.eye(2), torch.tensor([[r]])
        x, P = torch.tensor([obs[0, 0].item(), 0.0]), p0 * torch.eye(2)
        estimates = []
        for z in obs:
            Fj, x = jacobian(self.dynamics, x)
            P = Fj @ P @ Fj.T + Q
            S = self.H @ P @ self.H.T + R
            K = P @ self.H.T @ torch.linalg.inv(S)
            x = x + (K @ (z - self.H @ x)).squeeze(-1)
            P = (torch.eye(2) - K @ self.H) @ P
            estimates.append(x)
        return torch.stack(estimates)

    def _eval_step(self, batch, stage):
        states, obs = batch
        rmse = torch.stack([(self.ekf(o) - s).pow(2).mean().sqrt() for s, o in zip(states, obs)]).mean()
        self.log(f"{stage}_rmse", rmse.item())
        return rmse

    def validation_step(self, batch, batch_idx):
        return self._eval_step(batch, "val")

    def test_step(self, batch, batch_idx):
        return self._eval_step(batch, "test")


class Trainer:
    def __init__(self, max_epochs, inference_mode=True, log_every_n_steps=50, patience=3):
        self.max_epochs, self.inference_mode = max_epochs, inference_mode
        self.log_every_n_steps, self.patience = log_every_n_steps, patience
        self.best_state, self.best_score = None, float("inf")
        self.state_fn = None

    def _evaluation_context(self):
        if self.inference_mode and self.state_fn != "fit":
            return torch.inference_mode()
        return torch.no_grad()

    def _run_eval(self, model, loader, step_name):
        model.eval()
        with self._evaluation_context():
            outs = [getattr(model, step_name)(batch, i) for i, batch in enumerate(loader)]
        model.train()
        return torch.stack(outs).mean().item()

    def fit(self, model, train_loader, val_loader):
        self.state_fn = "fit"
        opt, sched = model.configure_optimizers()
        global_step, bad_epochs = 0, 0
        for epoch in range(self.max_epochs):
            model.train()
            for i, batch in enumerate(train_loader):
                loss = model.training_step(batch, i)
                opt.zero_grad()
                loss.backward()
                opt.step()
                global_step += 1
                if global_step % self.log_every_n_steps == 0:
                    print(f"epoch {epoch} step {global_step} train_loss {loss.item():.6f}")
            sched.step()
            val = self._run_eval(model, val_loader, "validation_step")
            print(f"epoch {epoch} val_rmse {val:.4f}")
            if val < self.best_score:
                self.best_score, self.best_state, bad_epochs = val, copy.deepcopy(model.state_dict()), 0
            else:
                bad_epochs += 1
                if bad_epochs >= self.patience:
                    break
        model.load_state_dict(self.best_state)
        self.state_fn = None

    def test(self, model, test_loader):
        self.state_fn = "test"
        result = self._run_eval(model, test_loader, "test_step")
        self.state_fn = None
        return {"test_rmse": result}


def main():
    cfg, t0 = CONFIG, time.time()
    rng = np.random.default_rng(0)
    states, obs = make_trajectories(cfg["data"], rng)
    n_tr = int(0.6 * len(states))
    n_va = int(0.2 * len(states))
    tr = states[:n_tr]
    x, x_next = tr[:, :-1].reshape(-1, 2), tr[:, 1:].reshape(-1, 2)
    train_loader = DataLoader(TensorDataset(x, x_next), batch_size=cfg["data"]["batch_size"], shuffle=True)
    val_loader = DataLoader(TensorDataset(states[n_tr:n_tr + n_va], obs[n_tr:n_tr + n_va]), batch_size=4)
    test_loader = DataLoader(TensorDataset(states[n_tr + n_va:], obs[n_tr + n_va:]), batch_size=4)
    model = LitEKF(cfg)
    trainer = Trainer(**cfg["trainer"])
    trainer.fit(model, train_loader, val_loader)
    print(trainer.test(model, test_loader), f"({time.time() - t0:.1f}s)")


if __name__ == "__main__":
    main()
