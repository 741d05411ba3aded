# expect: clean
# shape: the twin of state_restore_between_steps_crash.py with the fix of the original solver: the state is restored only when `reload_state` is set, and it is not; nothing a graph saved is overwritten
import torch
import torch.nn as nn


class ODEFunc(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, dim), nn.BatchNorm1d(dim), nn.Tanh(), nn.Linear(dim, dim))

    def forward(self, y):
        return self.net(y)


class Solver:
    def __init__(self, func, h=0.1, reload_state=False):
        self.func, self.h, self.reload_state = func, h, reload_state

    def try_step(self, y):
        state = self.func.state_dict()
        with torch.no_grad():
            trial = y + 2 * self.h * self.func(y)
        if self.reload_state:
            self.func.load_state_dict(state)
        return trial.norm().item()

    def integrate(self, y, steps=2):
        for _ in range(steps):
            y = y + self.h * self.func(y)
            self.try_step(y.detach())
        return y


func = ODEFunc(6)
solver = Solver(func)
opt = torch.optim.Adam(func.parameters(), lr=1e-3)
y0, target = torch.randn(8, 6), torch.randn(8, 6)
for epoch in range(2):
    opt.zero_grad()
    loss = (solver.integrate(y0) - target).pow(2).mean()
    loss.backward()
    opt.step()
