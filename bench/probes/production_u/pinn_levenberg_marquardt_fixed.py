# expect: clean
# source: https://github.com/fabiodimarco/torch-levenberg-marquardt/issues/7
"""Physics-informed network for a decay ODE trained with Levenberg-Marquardt.

The PINN returns the ODE residual du/dt + k*u (obtained with autograd inside
forward) for collocation times, plus an initial-condition residual. Training
uses a Levenberg-Marquardt module modelled on torch-levenberg-marquardt: flat
parameter vector bound to the model, damping strategy object, Jacobian of
the residuals w.r.t. the parameters, damped Gauss-Newton solve, accept/reject
with backup/restore, and a small fit loop with logging.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn


@dataclass
class Config:
    num_steps: int = 64
    t_max: float = 2.0
    decay: float = 1.5
    hidden: int = 12
    epochs: int = 6
    attempts_per_step: int = 5
    seed: int = 0


class PINN(nn.Module):
    def __init__(self, hidden, decay):
        super().__init__()
        self.decay = decay
        self.model = nn.Sequential(nn.Linear(1, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                                   nn.Linear(hidden, 1))

    def forward(self, t):
        with torch.enable_grad():
            if not t.requires_grad:
                t = t.clone().requires_grad_(True)
            u = self.model(t)
            u_t = torch.autograd.grad(u, t, grad_outputs=torch.ones_like(u), create_graph=True)[0]
            residual = u_t + self.decay * u
            u0 = self.model(torch.zeros(1, 1))
        ic = (u0 - 1.0).expand_as(residual)
        return torch.cat([residual, ic], dim=1)


class MSELoss:
    def residuals(self, targets, outputs):
        return outputs - targets

    def __call__(self, targets, outputs):
        return 0.5 * self.residuals(targets, outputs).pow(2).mean()


class StandardDampingStrategy:
    def __init__(self, starting_value=1e-3, dec_factor=0.1, inc_factor=10.0, min_value=1e-10, max_value=1e10):
        self.starting_value = starting_value
        self.dec_factor, self.inc_factor = dec_factor, inc_factor
        self.min_value, self.max_value = min_value, max_value
        self.damping_factor = starting_value

    def reset(self):
        self.damping_factor = self.starting_value

    def decrease(self):
        self.damping_factor = max(self.damping_factor * self.dec_factor, self.min_value)

    def increase(self):
        self.damping_factor = min(self.damping_factor * self.inc_factor, self.max_value)

    def apply(self, JJ):
        return JJ + self.damping_factor * torch.eye(JJ.size(0), dtype=JJ.dtype)


class LevenbergMarquardtModule:
    def __init__(self, model, loss_fn=None, damping_strategy=None, learning_rate=1.0, attempts_per_step=10):
        self._model = model
        self.loss_fn = loss_fn or MSELoss()
        self.damping_strategy = damping_strategy or StandardDampingStrategy()
        self.learning_rate = learning_rate
        self.attempts_per_step = attempts_per_step
        self._params = {n: p for n, p in model.named_parameters() if p.requires_grad}
        self._splits = [p.numel() for p in self._params.values()]
        self.flat_params = torch.cat([p.detach().flatten() for p in self._params.values()])
        start = 0
        for p in self._params.values():
            p.data = self.flat_params[start:start + p.numel()].view_as(p)
            start += p.numel()
        self.backup_parameters()
        self._num_outputs = None

    @torch.no_grad()
    def backup_parameters(self):
        self._flat_params_backup = self.flat_params.clone()

    @torch.no_grad()
    def restore_parameters(self):
        self.flat_params.copy_(self._flat_params_backup)

    @torch.no_grad()
    def _compute_num_outputs(self, inputs, targets):
        dummy_inputs = torch.zeros((1,) + tuple(inputs.shape[1:]), dtype=inputs.dtype)
        dummy_targets = torch.zeros((1,) + tuple(targets.shape[1:]), dtype=targets.dtype)
        outputs = self._model(dummy_inputs)
        return self.loss_fn.residuals(dummy_targets, outputs).numel()

    def _residuals_fn(self, inputs, targets):
        def fn(flat):
            params = {name: t.view_as(p) for (name, p), t in
                      zip(self._params.items(), torch.split(flat, self._splits))}
            outputs = torch.func.functional_call(self._model, params, (inputs,))
            return self.loss_fn.residuals(targets, outputs).reshape(-1)
        return fn

    def _compute_jacobian(self, inputs, targets):
        fn = self._residuals_fn(inputs, targets)
        flat = self.flat_params.clone()
        J = torch.autograd.functional.jacobian(fn, flat)
        with torch.enable_grad():
            r = fn(flat).detach()
        return J.detach(), r.view(-1, 1)

    @torch.no_grad()
    def _apply_updates(self, updates):
        self.flat_params.add_(-self.learning_rate * updates.view(-1))

    def _loss(self, inputs, targets):
        with torch.enable_grad():
            return float(self.loss_fn(targets, self._model(inputs)))

    def training_step(self, inputs, targets):
        if self._num_outputs is None:
            self._num_outputs = self._compute_num_outputs(inputs, targets)
        J, residuals = self._compute_jacobian(inputs, targets)
        loss = 0.5 * residuals.pow(2).mean().item()
        JJ = J.t() @ J
        rhs = J.t() @ residuals
        stop_training = False
        for attempt in range(self.attempts_per_step):
            self.backup_parameters()
            updates = torch.linalg.solve(self.damping_strategy.apply(JJ), rhs)
            self._apply_updates(updates)
            new_loss = self._loss(inputs, targets)
            if new_loss < loss:
                self.damping_strategy.decrease()
                return new_loss, stop_training, attempt
            self.restore_parameters()
            self.damping_strategy.increase()
        stop_training = self.damping_strategy.damping_factor >= self.damping_strategy.max_value
        return loss, stop_training, self.attempts_per_step


def fit(module, inputs, targets, epochs):
    history = []
    for epoch in range(epochs):
        loss, stop, attempts = module.training_step(inputs, targets)
        history.append(loss)
        print("epoch %d loss %.6f attempts %d damping %.1e" % (
            epoch, loss, attempts, module.damping_strategy.damping_factor))
        if stop:
            break
    return history


def main():
    cfg = Config()
    torch.manual_seed(cfg.seed)
    t = torch.linspace(0.0, cfg.t_max, cfg.num_steps).view(-1, 1).requires_grad_(True)
    targets = torch.zeros(cfg.num_steps, 2)
    pinn = PINN(cfg.hidden, cfg.decay)
    module = LevenbergMarquardtModule(pinn, attempts_per_step=cfg.attempts_per_step)
    fit(module, t, targets, cfg.epochs)
    with torch.enable_grad():
        u_end = pinn.model(torch.tensor([[cfg.t_max]])).item()
    print("u(t_max)=%.4f exact=%.4f" % (u_end, math.exp(-cfg.decay * cfg.t_max)))


if __name__ == "__main__":
    main()
